"""Why a single agent must leave the pool, judged on its own: health, wear and age.

The planner asks this of every agent that is not busy; the checkout order asks it too, so an
agent that is due to be retired is never handed out in the meantime. Rules that depend on the
rest of the pool (idle overflow, a lowered maxSize) are the planner's.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentpool.api.reasons import RetireReason
from agentpool.pool.observed import ObservedAgent
from agentpool.pool.policy import PoolPolicy

# The words of agentpool.api.reasons, as plain strings for plans and Events.
FAILED = "Failed"  # the pod failed or crash-loops
LOST = str(RetireReason.CALL_TIMED_OUT)  # its call timed out: the agent's state is unknown
RESET_FAILED = str(RetireReason.RESET_FAILED)
QUARANTINED = str(RetireReason.QUARANTINED)
MAX_USES = str(RetireReason.MAX_USES)
MAX_LIFETIME = str(RetireReason.MAX_LIFETIME)
OUTDATED = str(RetireReason.OUTDATED)
TOKEN_CHANGED = str(RetireReason.TOKEN_CHANGED)
UNREADY = str(RetireReason.UNREADY)
IDLE_TIMEOUT = str(RetireReason.IDLE_TIMEOUT)
SCALED_DOWN = str(RetireReason.SCALED_DOWN)

RETIREMENT_REASONS = (
    FAILED,
    LOST,
    RESET_FAILED,
    QUARANTINED,
    MAX_USES,
    MAX_LIFETIME,
    OUTDATED,
    TOKEN_CHANGED,
    UNREADY,
    IDLE_TIMEOUT,
    SCALED_DOWN,
)


def retirement_reason(
    policy: PoolPolicy,
    agent: ObservedAgent,
    now: float | None,
) -> str | None:
    """The reason this agent must go, or None if it may stay; None always for a busy agent.

    Rules are checked in order of urgency, so the reason given is the most telling one. With
    `now` None the age rule is skipped (for callers that have no clock at hand).
    """
    if agent.busy or agent.deleting:
        return None
    if agent.failed:
        return FAILED
    if agent.lost:
        return LOST
    if agent.reset_failed:
        return RESET_FAILED
    if agent.quarantined and policy.quarantine_after_failures:
        return QUARANTINED
    if policy.max_uses and agent.uses >= policy.max_uses:
        return MAX_USES
    lifetime = policy.max_lifetime_seconds
    if now is not None and lifetime and agent.age(now) >= lifetime:
        return MAX_LIFETIME
    if policy.template_hash and agent.template_hash != policy.template_hash:
        return OUTDATED
    if policy.token_hash and agent.token_hash and agent.token_hash != policy.token_hash:
        # Started with a token the operator no longer has: it would refuse every call.
        return TOKEN_CHANGED
    if agent.turned_unready:
        return UNREADY
    return None


def summarise_retirements(retired: Sequence[tuple[str, str]]) -> str:
    """One Event message for the agents retired in one pass, as (name, reason) pairs.

    "Retired agent a: Quarantined" for one; "Retired 3 agents: a, b (MaxUses); c (Quarantined)"
    for more, reasons in order of first appearance, so a burst of retirements is one Event and
    not one per agent.
    """
    if len(retired) == 1:
        name, reason = retired[0]
        return f"Retired agent {name}: {reason}"
    by_reason: dict[str, list[str]] = {}
    for name, reason in retired:
        by_reason.setdefault(reason, []).append(name)
    parts = "; ".join(f"{', '.join(names)} ({reason})" for reason, names in by_reason.items())
    return f"Retired {len(retired)} agents: {parts}"
