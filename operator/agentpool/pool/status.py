"""The pool's status as a user reads it: counts, state, conditions, sizing advice.

`compute_status` is pure: the AgentPool reconciler calls it with what it observed and what the
broker knows, then maps the `PoolStatusView` onto the API's status model. The state keeps
poolboy's meanings (Ready: a checkout gets an idle agent at once; Overflow: none is idle and
overflow agents beyond minSize serve more; Full: none is idle and the pool may not grow), with
poolboy's idle workers as the available agents and its overflow as the busy agents beyond
minSize, since here an idle overflow agent stays until its idle timeout. Two states poolboy
has no need of say that no agent serves yet: Starting and ScaledToZero.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from agentpool.api import PoolState
from agentpool.api.conditions import ConditionView
from agentpool.api.reasons import ConditionType, Reason
from agentpool.pool.checkout import available_agents
from agentpool.pool.observed import (
    CRASH_LOOP_BACK_OFF,
    CREATE_CONTAINER_CONFIG_ERROR,
    ERR_IMAGE_PULL,
    IMAGE_PULL_BACK_OFF,
    ObservedAgent,
    Waiter,
)
from agentpool.pool.plan import desired_size, slots_taken, waiting_slots
from agentpool.pool.pods import PodFailure
from agentpool.pool.policy import PoolPolicy
from agentpool.pool.rollout import (
    RolloutMark,
    progressing_condition,
    track_progress,
    updated_agents,
)
from agentpool.pool.sizing import DemandSample, SizingAdvice, recommend

READY = str(ConditionType.READY)
DEGRADED = str(ConditionType.DEGRADED)

AGENTS_READY = str(Reason.AGENTS_READY)
AGENTS_STARTING = str(Reason.AGENTS_STARTING)
AS_EXPECTED = str(Reason.AS_EXPECTED)
UNSCHEDULABLE = str(Reason.UNSCHEDULABLE)
READINESS_FAILING = str(Reason.READINESS_FAILING)
POD_FAILED = str(Reason.POD_FAILED)
AGENTS_NOT_READY = str(Reason.AGENTS_NOT_READY)


@dataclass(slots=True)
class PoolStatusView:
    """Everything the pool core reports about a pool; the operator maps it to the status model."""

    replicas: int
    ready_replicas: int
    available: int
    busy: int
    overflow: int
    waiting: int
    state: PoolState
    slots: int = 0
    busy_slots: int = 0
    updated_replicas: int = 0
    conditions: list[ConditionView] = field(default_factory=list)
    recommendation: SizingAdvice | None = None
    cold_start_seconds: float | None = None


def state_name(
    *, available: int, busy: int, replicas: int, waiting: int, min_size: int, max_size: int
) -> PoolState:
    """What a checkout finds in the pool now, in poolboy's words where poolboy has them.

    Ready while an agent is idle. With none idle and none busy, no agent serves yet: Starting
    while agents are wanted (minSize, or a waiting checkout) and may run, else ScaledToZero.
    With every serving agent busy: Full when the pool may not grow (at maxSize, or no overflow
    allowed), else Overflow, since further checkouts are served by overflow agents.
    """
    if available > 0:
        return "Ready"
    if busy == 0:
        wanted = replicas > 0 or min_size > 0 or waiting > 0
        return "Starting" if wanted and max_size > 0 else "ScaledToZero"
    if max_size <= min_size or replicas >= max_size:
        return "Full"
    return "Overflow"


def compute_status(
    policy: PoolPolicy,
    agents: Iterable[ObservedAgent],
    waiters: Sequence[Waiter],
    now: float,
    *,
    history: Sequence[DemandSample] = (),
    window_seconds: float = 3600.0,
    rollout: RolloutMark | None = None,
) -> PoolStatusView:
    """The status of a pool from its observed agents, its waiters and its demand history.

    `history` holds earlier demand samples (the current one is added here); a scheduled pod
    still not Ready the policy's `progress_deadline_seconds` after creation makes the pool
    Degraded (AgentsNotReady). `rollout` is where the rollout last moved
    (:func:`agentpool.pool.rollout.track_progress`); None: it moves now.
    """
    agents = list(agents)
    live = [agent for agent in agents if agent.live]
    replicas = len(live)
    ready = sum(1 for agent in live if agent.ready)
    busy = sum(1 for agent in live if agent.busy)
    busy_slots = sum(agent.slots_in_use for agent in live)
    slots = sum(policy.slots for agent in live if agent.ready)
    available = len(available_agents(policy, live, now=now))
    overflow = max(0, replicas - policy.min_size)
    state = state_name(
        available=available,
        busy=busy,
        replicas=replicas,
        waiting=len(waiters),
        min_size=policy.min_size,
        max_size=policy.max_size,
    )
    # The agents the pool keeps or is starting: what it wants now, or more while idle overflow
    # waits out its timeout (or busy agents outlive a lowered maxSize).
    waiting = waiting_slots(policy, waiters)
    taken = sum(slots_taken(policy, agent, now) for agent in live)
    wanted = max(replicas, desired_size(policy, busy=taken, waiting=waiting))
    current = DemandSample(at=now, busy=busy_slots, waiting=waiting, slots=policy.slots)
    return PoolStatusView(
        replicas=replicas,
        ready_replicas=ready,
        available=available,
        busy=busy,
        overflow=overflow,
        waiting=len(waiters),
        state=state,
        slots=slots,
        busy_slots=busy_slots,
        conditions=[
            ready_condition(policy, ready=ready, wanted=wanted, available=available),
            degraded_condition(live, now=now, deadline=policy.progress_deadline_seconds),
            progressing_condition(
                policy, live, rollout or track_progress(None, policy, live, now), now
            ),
        ],
        updated_replicas=len(updated_agents(policy, live)),
        recommendation=recommend([*history, current], now=now, window=window_seconds),
        cold_start_seconds=cold_start_seconds(agents),
    )


def cold_start_seconds(agents: Iterable[ObservedAgent]) -> float | None:
    """The pool's measured cold start: the median, over its agents that turned Ready, of the
    seconds from pod creation to Ready; None before any did."""
    return _median(sorted(s for agent in agents if (s := agent.cold_start_seconds) is not None))


def ready_condition(
    policy: PoolPolicy, *, ready: int, wanted: int, available: int
) -> ConditionView:
    """Ready is True once minSize agents are Ready; the message counts the Ready agents out of
    the agents the pool keeps or is starting (`wanted`, never fewer than are Ready) and says
    how many of them are idle."""
    wanted = max(wanted, ready)
    noun = "agent" if wanted == 1 else "agents"
    message = f"{ready} of {wanted} {noun} ready, {available} idle (minSize {policy.min_size})"
    if ready >= policy.min_size:
        return ConditionView(READY, "True", AGENTS_READY, message)
    return ConditionView(READY, "False", AGENTS_STARTING, message)


def degraded_condition(
    agents: Sequence[ObservedAgent],
    *,
    now: float,
    deadline: float | None = None,
) -> ConditionView:
    """Degraded is True while any agent cannot start or serve; the most telling reason wins.
    An agent not Ready ``deadline`` seconds after its creation (None: never) is AgentsNotReady."""
    found: dict[str, list[str]] = {}
    for agent in agents:
        reason = _trouble(agent, now=now, deadline=deadline)
        if reason is not None:
            found.setdefault(reason, []).append(agent.name)
    for reason in (
        UNSCHEDULABLE,
        IMAGE_PULL_BACK_OFF,
        CRASH_LOOP_BACK_OFF,
        CREATE_CONTAINER_CONFIG_ERROR,
        READINESS_FAILING,
        AGENTS_NOT_READY,
        POD_FAILED,
    ):
        if reason == AGENTS_NOT_READY and reason in found and deadline is not None:
            late = [agent for agent in agents if agent.name in found[reason]]
            return not_ready_condition(late, now=now, deadline=deadline)
        if reason in found:
            names = sorted(found[reason])
            noun = "agent" if len(names) == 1 else "agents"
            return ConditionView(DEGRADED, "True", reason, f"{reason}: {noun} {_names(names)}")
    return ConditionView(DEGRADED, "False", AS_EXPECTED, "every agent is starting or serving")


#: The most agent pods a Degraded message names; the rest are counted.
NAMED_PODS = 5


def start_failure_condition(failures: Sequence[PodFailure], *, count: int) -> ConditionView:
    """Degraded after `count` agents in a row failed before turning Ready, `failures` being the
    latest of them, oldest first: the newest one's reason and message, the count, and the names
    of the newest pods (at most five), so that `kubectl logs POD` can be run on them."""
    named = [failure.pod for failure in failures[-NAMED_PODS:]]
    names = ", ".join(named) + (f" and {count - len(named)} more" if count > len(named) else "")
    noun = "agent" if count == 1 else "agents"
    last = failures[-1]
    message = f"{last.message} ({count} {noun} failed before turning Ready: {names})"
    return ConditionView(DEGRADED, "True", last.reason, message)


def not_ready_condition(
    agents: Sequence[ObservedAgent], *, now: float, deadline: float
) -> ConditionView:
    """Degraded AgentsNotReady: how many agents are past the progress deadline, the oldest's
    wait (in whole minutes past one, so the message, and the status, change at most once a
    minute), and their names, oldest first."""
    oldest = sorted(agents, key=lambda agent: (agent.created_at, agent.name))
    waited = oldest[0].age(now)
    since = f"{int(waited // 60)} min" if waited >= 60 else f"{deadline:g}s"
    noun = "agent is" if len(agents) == 1 else "agents are"
    message = (
        f"{len(agents)} {noun} not Ready past progressDeadlineSeconds ({deadline:g}s), the "
        f"oldest for over {since}: {_names([agent.name for agent in oldest])}"
    )
    return ConditionView(DEGRADED, "True", AGENTS_NOT_READY, message)


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[:NAMED_PODS])
    more = len(names) - NAMED_PODS
    return shown + (f" and {more} more" if more > 0 else "")


def _trouble(
    agent: ObservedAgent,
    *,
    now: float,
    deadline: float | None,
) -> str | None:
    if agent.unschedulable and not agent.ready:
        return UNSCHEDULABLE
    if agent.waiting_reason in (IMAGE_PULL_BACK_OFF, ERR_IMAGE_PULL):
        return IMAGE_PULL_BACK_OFF
    if agent.waiting_reason == CRASH_LOOP_BACK_OFF:
        return CRASH_LOOP_BACK_OFF
    if agent.waiting_reason == CREATE_CONTAINER_CONFIG_ERROR:
        return CREATE_CONTAINER_CONFIG_ERROR
    if agent.turned_unready and not agent.failed:
        return READINESS_FAILING
    if (
        deadline is not None
        and agent.pending
        and agent.scheduled
        and agent.waiting_reason is None
        and agent.age(now) >= deadline
    ):
        return AGENTS_NOT_READY
    if agent.failed:
        return POD_FAILED
    return None


def _median(values: Sequence[float]) -> float | None:
    if not values:
        return None
    middle = len(values) // 2
    if len(values) % 2:
        return values[middle]
    return (values[middle - 1] + values[middle]) / 2
