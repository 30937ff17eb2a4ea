"""The rhythm of the AgentPool reconciler's passes: what a pass reports, when the next one runs.

A pass runs on every trigger (a pod event, a spec change, a waiter, an agent checked in broken)
and besides at the latest when a rule of time could change something: every second while
overflow, lifetimes or waiters are in play, to honour them to the second; every few seconds while
agents start, fail, retire or the pool is troubled. A steady pool (every agent Ready, sound and
free, nothing troubled, nothing pending) has no rule of time left: it is looked at only as a
safety net, once every five minutes, and its first checkout wakes it (see
``Broker.wake_on_checkout``), so a thousand idle pools cost the operator next to nothing. Its
retirements are reported as Events, and those that shrank the pool count toward the size change
it reports. Called by :mod:`agentpool.handlers.pools`; pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentpool.api.reasons import ConditionType, Reason, RetireReason
from agentpool.pool.observed import ObservedAgent
from agentpool.pool.policy import PoolPolicy

#: Retirements that shrink the pool rather than replace an agent.
SCALE_DOWN_REASONS = frozenset({str(RetireReason.IDLE_TIMEOUT), str(RetireReason.SCALED_DOWN)})

#: The conditions of a pool that nothing troubles, by type: (status, reason) each.
SETTLED_CONDITIONS = {
    str(ConditionType.READY): ("True", str(Reason.AGENTS_READY)),
    str(ConditionType.DEGRADED): ("False", str(Reason.AS_EXPECTED)),
    str(ConditionType.PROGRESSING): ("True", str(Reason.ROLLOUT_COMPLETE)),
}


def scaled_down(retired: Iterable[tuple[str, str]]) -> int:
    """How many of the (name, reason) retirements shrank the pool."""
    return sum(1 for _, reason in retired if reason in SCALE_DOWN_REASONS)


def timed_rules(policy: PoolPolicy, *, waiting: int) -> bool:
    """Whether overflow, lifetimes or waiters are in play: rules honoured to the second."""
    return policy.max_overflow > 0 or policy.max_lifetime_seconds > 0 or waiting > 0


def settled(conditions: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the pool's conditions say nothing troubles it: Ready, not Degraded, its rollout
    complete."""
    for condition in conditions:
        expected = SETTLED_CONDITIONS.get(str(condition.get("type")))
        if expected is not None and (condition.get("status"), condition.get("reason")) != expected:
            return False
    return True


def steady(
    policy: PoolPolicy,
    agents: Iterable[ObservedAgent],
    *,
    conditions: Sequence[Mapping[str, Any]],
    waiting: int,
    pending: bool,
) -> bool:
    """Whether no rule of time can change the pool until something happens to it: no timed
    rule in play, every agent Ready, sound and free, nothing ``pending`` (a pod to create or
    delete, a failed pod kept, headroom still moving) and its ``conditions`` settled.

    A busy agent makes a pool unsteady: a checkin of a sound agent wakes nobody, and the demand
    it stands for is sampled on the passes it keeps coming."""
    if pending or timed_rules(policy, waiting=waiting) or not settled(conditions):
        return False
    return all(agent.idle and not agent.busy_slots for agent in agents)


def pass_delay(
    policy: PoolPolicy,
    *,
    waiting: int,
    idle: float,
    timed: float,
    quiet: float | None = None,
    steady: bool = False,
) -> float:
    """Seconds until the next pass at the latest: ``timed`` while overflow, lifetimes or
    waiters are in play, ``quiet`` for a ``steady`` pool, ``idle`` otherwise."""
    if timed_rules(policy, waiting=waiting):
        return timed
    if steady and quiet is not None:
        return max(idle, quiet)
    return idle
