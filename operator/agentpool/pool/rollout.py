"""How far a rollout of a changed pod template has gone, and whether it still moves.

The planner rolls outdated agents within maxSurge and maxUnavailable (:mod:`agentpool.pool.plan`);
this module reports on it, as a Deployment reports on its rollout: `updatedReplicas` counts the
agents on the current template, and the Progressing condition is True with RolloutComplete once
no outdated agent is left and minSize agents are Ready, True with RollingOut while the rollout
moves, and False with ProgressDeadlineExceeded once it has not moved for
progressDeadlineSeconds. A rollout moves when an agent on the current template is created or
turns Ready, or an outdated one leaves. A new pool, one never complete with no outdated agent,
is not rolling out but starting, and its messages say so. The AgentPool status writer keeps the last
:class:`RolloutMark` between passes and calls :func:`track_progress` and
:func:`progressing_condition`; pure, with `now` given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agentpool.api.conditions import ConditionView
from agentpool.api.raw import RawCondition
from agentpool.api.reasons import ConditionType, Reason
from agentpool.pool.observed import ObservedAgent
from agentpool.pool.policy import PoolPolicy
from agentpool.pool.recycling import outdated

PROGRESSING = str(ConditionType.PROGRESSING)

#: The most not-Ready new agents a stuck rollout's message names; the rest are counted.
NAMED_PODS = 5
#: How a new pool's Progressing message begins.
NEW_POOL = "new pool"


@dataclass(frozen=True, slots=True)
class RolloutMark:
    """Where a rollout stood when it last moved: the template it rolls to, its agents updated,
    updated and Ready, and outdated, and `since` when it was first seen so; `settled` once the
    pool was complete (a pool not yet settled with no outdated agent is a new pool)."""

    template_hash: str
    updated: int
    updated_ready: int
    outdated: int
    since: float
    settled: bool = False

    def same_place(self, other: RolloutMark) -> bool:
        """Nothing moved between the two marks."""
        return (self.template_hash, self.updated, self.updated_ready, self.outdated) == (
            other.template_hash,
            other.updated,
            other.updated_ready,
            other.outdated,
        )


def updated_agents(policy: PoolPolicy, agents: Iterable[ObservedAgent]) -> list[ObservedAgent]:
    """The live agents on the pool's current template."""
    return [agent for agent in agents if agent.live and not outdated(policy, agent)]


def track_progress(
    last: RolloutMark | None, policy: PoolPolicy, agents: Sequence[ObservedAgent], now: float
) -> RolloutMark:
    """The rollout's mark at `now`: `last` unchanged while nothing moved, else a new mark.

    More agents updated, updated and Ready, or fewer outdated is progress; a change of template
    starts the clock again. Agents that leave the current template's count (an idle overflow
    agent timing out, say) move the mark too, which can only postpone a stuck report.
    """
    live = [agent for agent in agents if agent.live]
    updated = updated_agents(policy, live)
    settled = (last is not None and last.settled) or _complete(policy, live)
    mark = RolloutMark(
        template_hash=policy.template_hash,
        updated=len(updated),
        updated_ready=sum(1 for agent in updated if agent.ready),
        outdated=len(live) - len(updated),
        since=now,
        settled=settled,
    )
    if last is not None and last.same_place(mark):
        return last if last.settled == settled else dataclasses.replace(last, settled=settled)
    return mark


def _complete(policy: PoolPolicy, live: Sequence[ObservedAgent]) -> bool:
    """No outdated agent is left and minSize agents are Ready."""
    updated = updated_agents(policy, live)
    ready = sum(1 for agent in live if agent.ready)
    return len(updated) == len(live) and ready >= policy.min_size


def restored_mark(
    conditions: Iterable[RawCondition] | None,
    policy: PoolPolicy,
    agents: Sequence[ObservedAgent],
    now: float,
) -> RolloutMark:
    """The first mark of a pool's loop, from the conditions its status holds: a rollout the
    last operator reported stuck stays stuck until it moves, rather than getting another
    progressDeadlineSeconds from a restart; a pool that reported anything but a new pool's
    start is settled."""
    progressing = [c for c in conditions or () if c.get("type") == PROGRESSING]
    mark = track_progress(None, policy, agents, now)
    if any(not str(c.get("message") or "").startswith(NEW_POOL) for c in progressing):
        mark = dataclasses.replace(mark, settled=True)
    stuck = any(c.get("reason") == Reason.PROGRESS_DEADLINE_EXCEEDED for c in progressing)
    if stuck:
        return dataclasses.replace(mark, since=now - policy.progress_deadline_seconds)
    return mark


def progressing_condition(
    policy: PoolPolicy, agents: Sequence[ObservedAgent], mark: RolloutMark, now: float
) -> ConditionView:
    """Progressing for a pool whose rollout was last seen at `mark`."""
    live = [agent for agent in agents if agent.live]
    updated = updated_agents(policy, live)
    ready = sum(1 for agent in live if agent.ready)
    counts = f"{len(updated)} of {len(live)} agents updated"
    if _complete(policy, live):
        return ConditionView(
            PROGRESSING, "True", str(Reason.ROLLOUT_COMPLETE), f"rollout complete: {counts}"
        )
    stalled = now - mark.since
    outdated = len(live) - len(updated)
    if not mark.settled and not outdated:
        return new_pool_condition(policy, live, stalled=stalled)
    if stalled < policy.progress_deadline_seconds:
        return ConditionView(
            PROGRESSING,
            "True",
            str(Reason.ROLLING_OUT),
            f"rolling out: {counts}, {ready} agents ready",
        )
    unready = sorted(agent.name for agent in updated if not agent.ready)
    why = f"new agents not Ready: {_names(unready)}" if unready else "no new agent started"
    message = (
        f"rollout made no progress for {int(stalled)}s (progressDeadlineSeconds"
        f" {int(policy.progress_deadline_seconds)}): {counts}, {why}"
        + ("; outdated agents keep serving" if outdated else "")
    )
    return ConditionView(PROGRESSING, "False", str(Reason.PROGRESS_DEADLINE_EXCEEDED), message)


def new_pool_condition(
    policy: PoolPolicy, live: Sequence[ObservedAgent], *, stalled: float
) -> ConditionView:
    """Progressing for a new pool starting its first agents: no template is rolled from, so it
    speaks of agents starting, and past progressDeadlineSeconds names those not Ready."""
    starting = max(len(live), policy.min_size)
    ready = sum(1 for agent in live if agent.ready)
    noun = "agent" if starting == 1 else "agents"
    if stalled < policy.progress_deadline_seconds:
        message = f"{NEW_POOL}: starting {starting} {noun}, {ready} ready"
        return ConditionView(PROGRESSING, "True", str(Reason.ROLLING_OUT), message)
    unready = sorted(agent.name for agent in live if not agent.ready)
    why = f"agents not Ready: {_names(unready)}" if unready else "no agent started"
    message = (
        f"{NEW_POOL} made no progress for {int(stalled)}s (progressDeadlineSeconds"
        f" {int(policy.progress_deadline_seconds)}): {ready} of {starting} {noun} ready, {why}"
    )
    return ConditionView(PROGRESSING, "False", str(Reason.PROGRESS_DEADLINE_EXCEEDED), message)


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[:NAMED_PODS])
    more = len(names) - NAMED_PODS
    return shown + (f" and {more} more" if more > 0 else "")
