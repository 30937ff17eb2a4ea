"""The rhythm of the AgentPool reconciler's passes: what a pass reports, when the next one runs.

A pass runs on every trigger and at least every few seconds; while overflow, lifetimes or
waiters are in play, every second, to honour them to the second. Its retirements are reported as
Events, and those that shrank the pool count toward the size change it reports. Called by
:mod:`agentpool.handlers.pools`; pure.
"""

from __future__ import annotations

from collections.abc import Iterable

from agentpool.api.reasons import RetireReason
from agentpool.pool.policy import PoolPolicy

#: Retirements that shrink the pool rather than replace an agent.
SCALE_DOWN_REASONS = frozenset({str(RetireReason.IDLE_TIMEOUT), str(RetireReason.SCALED_DOWN)})


def scaled_down(retired: Iterable[tuple[str, str]]) -> int:
    """How many of the (name, reason) retirements shrank the pool."""
    return sum(1 for _, reason in retired if reason in SCALE_DOWN_REASONS)


def pass_delay(policy: PoolPolicy, *, waiting: int, idle: float, timed: float) -> float:
    """Seconds until the next pass at the latest: ``timed`` while overflow, lifetimes or
    waiters are in play, ``idle`` otherwise."""
    if policy.max_overflow > 0 or policy.max_lifetime_seconds > 0 or waiting:
        return timed
    return idle
