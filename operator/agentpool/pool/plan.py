"""The scaling plan: how many agent pods to create and which to retire, and why.

`plan` is the pool's one decision, a pure function of the policy, the observed agents, the
waiters and the time: the AgentPool reconciler calls it on every visit (create, update, resume,
timer, a waiter queued, a pod changed), removes the retired agents from the broker's idle set,
deletes their pods and creates the new ones. It never retires a busy agent, never plans past
`maxSize` (but for a rollout's surge), and always aims at least at `minSize`.

`maxUnready` bounds the pool's pods that are not Ready as anyone watching them counts them: those
starting, failed pods kept for a look (:mod:`agentpool.pool.postmortem`), and pods on their way
out, a Ready agent retired now among them since its pod turns not Ready before it goes. The plan
creates pods, and a rollout retires Ready agents, only within it, so a pool whose agents cannot
turn Ready holds a few pods rather than all of them. When kept failed pods are what stands in the
way of the agents it wants, the oldest of them give way, and the plan creates once they are gone:
a look at a failed pod never costs the pool an agent for long. A pod being deleted counts only
until its grace period and `LOST_MARGIN_SECONDS` more have passed (`ObservedAgent.gone_by`): one
still there by then sits on a node that no longer answers and may stay Terminating for good, so
it must not keep the pool from refilling (a Deployment leaves terminating pods out for that
reason).

A changed pod template rolls as a Deployment rolls: new agents start first, up to `maxSurge`
pods above the desired agents (even past `maxSize`), and an idle outdated agent is retired only
while the Ready agents stay at least the desired agents less `maxUnavailable`; a busy outdated
agent finishes its items first. Outdated agents keep serving until they are retired.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from agentpool.api.reasons import RetireReason
from agentpool.pool.observed import (
    CRASH_LOOP_BACK_OFF,
    ERR_IMAGE_PULL,
    IMAGE_PULL_BACK_OFF,
    ObservedAgent,
    Waiter,
)
from agentpool.pool.policy import PoolPolicy
from agentpool.pool.recycling import due_reason, outdated, retirement_reason

HELD_REASONS = frozenset({IMAGE_PULL_BACK_OFF, ERR_IMAGE_PULL, CRASH_LOOP_BACK_OFF})

#: Seconds past a deleted pod's `gone_by` during which it still counts against maxUnready: the
#: kubelet's last status and the watch event take a moment after the grace period ends.
LOST_MARGIN_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class Retirement:
    """An agent to remove from the pool, with the reason (one CamelCase word) to report."""

    name: str
    reason: RetireReason


@dataclass(frozen=True, slots=True)
class Plan:
    """What the reconciler should do now.

    `create` new pods, `retire` these agents (never a busy one), aiming at `desired` live agents;
    `held` names the pods that cannot start (unschedulable, image pull failing) and are kept, not
    replaced, so a pool that cannot schedule does not churn pods. `give_way` names failed pods
    kept for a look that are to be deleted now, oldest first, because maxUnready leaves no room
    for the agents wanted, or the outdated agents a rollout retires, while they stay.
    """

    create: int
    retire: tuple[Retirement, ...]
    desired: int
    held: tuple[str, ...] = ()
    give_way: tuple[str, ...] = ()

    @property
    def retired_names(self) -> tuple[str, ...]:
        """The names of the agents to retire, in plan order."""
        return tuple(retirement.name for retirement in self.retire)

    @property
    def empty(self) -> bool:
        """Nothing to do."""
        return self.create == 0 and not self.retire


def desired_size(policy: PoolPolicy, *, busy: int, waiting: int) -> int:
    """How many live agents the pool wants: minSize, every waiter served with minIdle to spare.

    `busy` counts busy slots (a leased agent's every slot, a due agent's too: it takes no new
    item) and `waiting` the slots the waiters will take (:func:`waiting_slots`): with `slots`
    per agent, the two together need ceil((busy + waiting) / slots) agents. Waiters count as
    the busy slots they are about to be, so a burst grows the pool ahead of demand by `minIdle`
    agents as well. Capped at maxSize.
    """
    needed = -(-(busy + waiting) // policy.slots)
    wanted = max(policy.min_size, needed + policy.min_idle)
    return min(policy.max_size, wanted)


def waiting_slots(policy: PoolPolicy, waiters: Iterable[Waiter]) -> int:
    """Slots the waiters will take once served: one for an item, every slot of an agent for a
    lease, which the free slots of a partly busy agent cannot serve."""
    return sum(policy.slots if waiter.whole else 1 for waiter in waiters)


def plan(
    policy: PoolPolicy,
    agents: Iterable[ObservedAgent],
    waiters: Sequence[Waiter],
    now: float,
    *,
    kept: Mapping[str, float] | None = None,
) -> Plan:
    """Decide which pods to create and which agents to retire, from what is observed at `now`.

    `agents` is every pod of the pool, those being deleted too; `kept` names the failed ones
    kept for a look, with when each failed.
    """
    agents = list(agents)
    live = [agent for agent in agents if agent.live]
    busy = sum(slots_taken(policy, agent, now) for agent in live)
    retire: list[Retirement] = []
    keep: list[ObservedAgent] = []
    for agent in live:
        reason = retirement_reason(policy, agent, now)
        if reason is None:
            keep.append(agent)
        else:
            retire.append(Retirement(agent.name, reason))

    desired = desired_size(policy, busy=busy, waiting=waiting_slots(policy, waiters))
    stale = [agent for agent in keep if outdated(policy, agent)]
    surge, unavailable = policy.rollout_bounds(desired) if stale else (0, 0)

    # A lowered maxSize takes effect at once: agents not yet Ready go first (nothing warm is
    # lost), outdated ones before current ones, then the longest idle. A rollout's surge may
    # run above it.
    over_max = len(keep) - (policy.max_size + surge)
    if over_max > 0:
        for agent in _scale_down_order(keep, now, stale=stale)[:over_max]:
            retire.append(Retirement(agent.name, RetireReason.SCALED_DOWN))
            keep.remove(agent)
            if agent in stale:
                stale.remove(agent)

    # Idle overflow past its timeout goes, longest idle first, but never below what is wanted;
    # during a rollout only current agents beyond the desired count, the rollout retiring the
    # outdated ones.
    surplus = len(keep) - len(stale) - desired
    if surplus > 0:
        timed_out = [
            agent
            for agent in keep
            if agent.idle
            and agent.idle_for(now) >= policy.idle_timeout_seconds
            and agent not in stale
        ]
        timed_out.sort(key=lambda agent: (-agent.idle_for(now), agent.name))
        for agent in timed_out[:surplus]:
            retire.append(Retirement(agent.name, RetireReason.IDLE_TIMEOUT))
            keep.remove(agent)

    # Every pod but the Ready agents kept shows not Ready to a watcher, now or on its way out,
    # but for the pods lost with their node.
    showing = sum(1 for agent in agents if not lost(agent, now)) - sum(
        1 for agent in keep if agent.ready
    )
    rolled, blocked = _rollout_retirements(
        keep,
        stale,
        desired=desired,
        unavailable=unavailable,
        room=policy.max_unready - showing,
    )
    for agent in rolled:
        retire.append(Retirement(agent.name, RetireReason.OUTDATED))
        keep.remove(agent)
        showing += int(agent.ready)
    # New agents up to the desired count on the current template, within the surge: without
    # a rollout, simply the agents missing.
    current = sum(1 for agent in keep if not outdated(policy, agent))
    create = max(0, min(desired - current, desired + surge - len(keep)))

    held = tuple(
        agent.name
        for agent in keep
        if agent.pending and (agent.unschedulable or agent.waiting_reason in HELD_REASONS)
    )
    # The rest of what is wanted waits for the pods not Ready to turn Ready or go.
    room = max(0, policy.max_unready - showing)
    return Plan(
        create=min(room, create),
        retire=tuple(retire),
        desired=desired,
        held=held,
        give_way=_giving_way(
            agents, retire, kept or {}, now, short=max(0, create - room) + blocked
        ),
    )


def lost(agent: ObservedAgent, now: float) -> bool:
    """A pod being deleted that is still there well past its grace period: its node no longer
    answers, and it no longer counts against maxUnready."""
    return (
        agent.deleting and agent.gone_by is not None and now >= agent.gone_by + LOST_MARGIN_SECONDS
    )


def slots_taken(policy: PoolPolicy, agent: ObservedAgent, now: float) -> int:
    """Slots of the pool's capacity the agent takes, for the planner and the status: its busy
    slots, or a whole agent's worth when it is due for retirement, since a due agent takes no
    new item while it finishes its busy slots, so its free slots must not keep waiters from an
    overflow agent."""
    if agent.busy and due_reason(policy, agent, now) is not None:
        return policy.slots
    return agent.slots_in_use


def _rollout_retirements(
    keep: Sequence[ObservedAgent],
    stale: Sequence[ObservedAgent],
    *,
    desired: int,
    unavailable: int,
    room: int,
) -> tuple[list[ObservedAgent], int]:
    """The idle outdated agents a rollout retires now: any that is not Ready (it serves no
    one), then Ready ones while the Ready agents stay at least `desired - unavailable` and
    `room` more pods may show not Ready, as a Ready agent's pod does on its way out. With
    them, how many more Ready ones the floor lets go but `room` holds back, so kept failed
    pods can give way to a rollout that has used its surge as they do to new agents."""
    ready = sum(1 for agent in keep if agent.ready)
    floor = desired - unavailable
    chosen = []
    blocked = 0
    for agent in sorted(stale, key=lambda agent: (agent.ready, agent.name)):
        if agent.busy:
            continue
        if agent.ready:
            if ready - 1 < floor:
                continue
            ready -= 1
            if room < 1:
                blocked += 1
                continue
            room -= 1
        chosen.append(agent)
    return chosen, blocked


def _giving_way(
    agents: Sequence[ObservedAgent],
    retire: Sequence[Retirement],
    kept: Mapping[str, float],
    now: float,
    *,
    short: int,
) -> tuple[str, ...]:
    """The kept failed pods to delete so that `short` more pods can start or Ready outdated
    agents go, oldest failure first: as many as the pods already on their way out do not make
    room for (a pod lost with its node made its room already). A failed agent retired now may
    be kept in its turn, so it makes no room yet."""
    present = {agent.name for agent in agents}
    candidates = sorted((name for name in kept if name in present), key=lambda n: (kept[n], n))
    retiring = {retirement.name for retirement in retire}
    going = sum(
        1
        for agent in agents
        if agent.name not in kept
        and not lost(agent, now)
        and (agent.deleting or (agent.name in retiring and not agent.failed))
    )
    return tuple(candidates[: max(0, short - going)])


def _scale_down_order(
    agents: Sequence[ObservedAgent], now: float, *, stale: Sequence[ObservedAgent] = ()
) -> list[ObservedAgent]:
    candidates = [agent for agent in agents if not agent.busy]
    # Not-yet-Ready pods first, newest first; outdated before current; then Ready idle agents,
    # longest idle first.
    return sorted(
        candidates,
        key=lambda agent: (
            agent.ready,
            agent not in stale,
            -agent.created_at if not agent.ready else -agent.idle_for(now),
            agent.name,
        ),
    )
