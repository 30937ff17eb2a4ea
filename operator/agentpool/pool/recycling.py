"""Why a single agent must leave the pool, judged on its own: health, wear and age.

The planner asks this of every agent that is not busy; the checkout order asks it too, so an
agent that is due to be retired is never handed out in the meantime. Rules that depend on the
rest of the pool (idle overflow, a lowered maxSize, how many outdated agents a rollout retires
at once) are the planner's: an idle outdated agent is not due, it serves on until the rollout
has room to retire it.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentpool.api.reasons import RetireReason
from agentpool.pool.observed import ObservedAgent
from agentpool.pool.policy import PoolPolicy


def retirement_reason(
    policy: PoolPolicy,
    agent: ObservedAgent,
    now: float | None,
) -> RetireReason | None:
    """The reason this agent must go, or None if it may stay; None always for a busy agent
    (one with any slot busy), which finishes its items first.

    Rules are checked in order of urgency, so the reason given is the most telling one. With
    `now` None the age rule is skipped (for callers that have no clock at hand).
    """
    if agent.busy:
        return None
    return due_reason(policy, agent, now)


def due_reason(
    policy: PoolPolicy,
    agent: ObservedAgent,
    now: float | None,
) -> RetireReason | None:
    """The reason this agent is due to go, busy or not: an agent with several slots that is due
    takes no new item, and is retired (:func:`retirement_reason`) once its slots are free."""
    if agent.deleting:
        return None
    if agent.failed:
        return RetireReason.FAILED
    if agent.lost:
        return RetireReason.CALL_TIMED_OUT
    if agent.reset_failed:
        return RetireReason.RESET_FAILED
    if agent.quarantined and policy.quarantine_after_failures:
        return RetireReason.QUARANTINED
    if policy.max_uses and agent.uses >= policy.max_uses:
        return RetireReason.MAX_USES
    lifetime = policy.max_lifetime_seconds
    if now is not None and lifetime and agent.age(now) >= lifetime:
        return RetireReason.MAX_LIFETIME
    if agent.busy and outdated(policy, agent):
        # It finishes its items but takes no new one, so an agent with several slots drains.
        return RetireReason.OUTDATED
    if policy.token_hash and agent.token_hash and agent.token_hash != policy.token_hash:
        # Started with a token the operator no longer has: it would refuse every call.
        return RetireReason.TOKEN_CHANGED
    if agent.turned_unready:
        return RetireReason.UNREADY
    return None


def outdated(policy: PoolPolicy, agent: ObservedAgent) -> bool:
    """The agent runs an older pod template than the pool's: a rollout replaces it."""
    return bool(policy.template_hash) and agent.template_hash != policy.template_hash


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
