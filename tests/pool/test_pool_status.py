"""Pool status: its state, the counts, the conditions and the sizing advice."""

from __future__ import annotations

import pytest

from agentpool.pool import (
    DemandSample,
    ObservedAgent,
    PoolPolicy,
    Waiter,
    compute_status,
    recommend,
    state_name,
)
from agentpool.pool.pods import PodFailure
from agentpool.pool.status import start_failure_condition

NOW = 1000.0


def ready(name: str, *, is_busy: bool = False, created_at: float = 0.0) -> ObservedAgent:
    return ObservedAgent(
        name, created_at=created_at, ready=True, ready_at=created_at + 2.0, busy=is_busy
    )


@pytest.mark.parametrize(
    ("available", "busy", "replicas", "waiting", "min_size", "max_size", "state"),
    [
        # An idle agent is there: Ready, whatever else runs (idle overflow awaiting its timeout).
        (1, 0, 1, 0, 1, 1, "Ready"),
        (4, 0, 4, 0, 2, 4, "Ready"),
        (1, 3, 4, 0, 2, 4, "Ready"),
        # None idle and none in service yet: Starting while agents are on their way ...
        (0, 0, 0, 0, 2, 2, "Starting"),
        (0, 0, 2, 0, 2, 2, "Starting"),
        (0, 0, 0, 1, 0, 4, "Starting"),
        # ... ScaledToZero when none are wanted, or none may run.
        (0, 0, 0, 0, 0, 4, "ScaledToZero"),
        (0, 0, 0, 0, 0, 0, "ScaledToZero"),
        (0, 0, 0, 2, 0, 0, "ScaledToZero"),
        # Every agent busy and room to grow: overflow agents serve further checkouts.
        (0, 2, 2, 0, 2, 4, "Overflow"),
        (0, 3, 3, 1, 2, 4, "Overflow"),
        (0, 1, 1, 0, 0, 3, "Overflow"),
        # Every agent busy at maxSize, or with no overflow allowed: Full.
        (0, 3, 4, 1, 2, 4, "Full"),
        (0, 4, 4, 2, 2, 4, "Full"),
        (0, 2, 2, 0, 2, 2, "Full"),
        (0, 1, 1, 0, 2, 2, "Full"),
        # maxSize lowered below the busy agents: still Full.
        (0, 5, 5, 0, 2, 3, "Full"),
    ],
)
def test_state_says_what_a_checkout_finds(
    available: int, busy: int, replicas: int, waiting: int, min_size: int, max_size: int, state: str
) -> None:
    """Ready while an agent is idle; Starting or ScaledToZero while none serves; Overflow while
    every agent is busy and the pool may grow past minSize; Full once it may not."""
    found = state_name(
        available=available,
        busy=busy,
        replicas=replicas,
        waiting=waiting,
        min_size=min_size,
        max_size=max_size,
    )
    assert found == state


def test_counts() -> None:
    """replicas, readyReplicas, available, busy, overflow and waiting count what they say."""
    policy = PoolPolicy(min_size=2, max_size=6)
    agents = [
        ready("a"),
        ready("b", is_busy=True),
        ready("c", is_busy=True),
        ObservedAgent("p", created_at=NOW - 1),
        ObservedAgent("gone", ready=True, deleting=True),
    ]
    status = compute_status(policy, agents, [Waiter(0, 1), Waiter(0, 2)], NOW)
    assert (
        status.replicas,
        status.ready_replicas,
        status.available,
        status.busy,
        status.overflow,
        status.waiting,
        status.state,
    ) == (4, 3, 1, 2, 2, 2, "Ready")


def test_state_full_when_every_agent_busy_at_max() -> None:
    """A pool at maxSize with every agent busy is Full."""
    policy = PoolPolicy(min_size=1, max_size=2)
    status = compute_status(policy, [ready("a", is_busy=True), ready("b", is_busy=True)], (), NOW)
    assert status.state == "Full"


def test_idle_overflow_agents_leave_the_pool_ready_not_full() -> None:
    """Four idle agents at maxSize 4 (overflow awaiting its idle timeout) make a Ready pool,
    and Ready counts them against the agents the pool keeps, never more ready than there are."""
    policy = PoolPolicy(min_size=2, max_size=4)
    status = compute_status(policy, [ready(name) for name in "abcd"], (), NOW)
    assert status.state == "Ready"
    condition = status.conditions[0]
    assert (condition.status, condition.message) == (
        "True",
        "4 of 4 agents ready, 4 idle (minSize 2)",
    )


def test_a_new_pool_is_starting_not_full() -> None:
    """A pool whose agents are not Ready yet says Starting, and Ready counts what it waits for."""
    policy = PoolPolicy(min_size=2, max_size=2)
    for agents in ([], [ObservedAgent("p", created_at=NOW - 1)]):
        status = compute_status(policy, agents, (), NOW)
        assert status.state == "Starting"
        condition = status.conditions[0]
        assert (condition.status, condition.reason) == ("False", "AgentsStarting")
        assert condition.message == "0 of 2 agents ready, 0 idle (minSize 2)"


def test_a_pool_at_min_size_zero_with_no_demand_is_scaled_to_zero() -> None:
    """minSize 0 and nobody waiting: no agent runs, and the pool says ScaledToZero."""
    status = compute_status(PoolPolicy(min_size=0, max_size=4), [], (), NOW)
    assert status.state == "ScaledToZero"
    assert status.conditions[0].message == "0 of 0 agents ready, 0 idle (minSize 0)"


def test_ready_condition_follows_min_size() -> None:
    """Ready is False while fewer than minSize agents are Ready, True once they are."""
    policy = PoolPolicy(min_size=2, max_size=2)
    starting = compute_status(policy, [ready("a"), ObservedAgent("p")], (), NOW)
    assert (starting.conditions[0].type, starting.conditions[0].status) == ("Ready", "False")
    assert starting.conditions[0].reason == "AgentsStarting"
    assert starting.conditions[0].message == "1 of 2 agents ready, 1 idle (minSize 2)"
    up = compute_status(policy, [ready("a", is_busy=True), ready("b")], (), NOW)
    assert (up.conditions[0].status, up.conditions[0].reason) == ("True", "AgentsReady")
    assert up.conditions[0].message == "2 of 2 agents ready, 1 idle (minSize 2)"


@pytest.mark.parametrize(
    ("agent", "reason"),
    [
        (ObservedAgent("x", unschedulable=True, scheduled=False), "Unschedulable"),
        (ObservedAgent("x", waiting_reason="ImagePullBackOff"), "ImagePullBackOff"),
        (ObservedAgent("x", waiting_reason="ErrImagePull"), "ImagePullBackOff"),
        (ObservedAgent("x", waiting_reason="CrashLoopBackOff"), "CrashLoopBackOff"),
        (
            ObservedAgent("x", waiting_reason="CreateContainerConfigError"),
            "CreateContainerConfigError",
        ),
        (ObservedAgent("x", ready=False, ready_at=3.0), "ReadinessFailing"),
        (ObservedAgent("x", failed=True), "PodFailed"),
    ],
)
def test_degraded_reasons(agent: ObservedAgent, reason: str) -> None:
    """Degraded is True with the reason of the trouble and names the agent."""
    status = compute_status(PoolPolicy(), [ready("ok"), agent], (), NOW)
    degraded = status.conditions[1]
    assert (degraded.type, degraded.status, degraded.reason) == ("Degraded", "True", reason)
    assert "x" in degraded.message


def test_degraded_false_when_healthy() -> None:
    """A pool whose agents all start or serve is not Degraded."""
    starting = ObservedAgent("p", created_at=NOW - 5)
    status = compute_status(PoolPolicy(), [ready("a"), starting], (), NOW)
    assert (status.conditions[1].status, status.conditions[1].reason) == ("False", "AsExpected")


def test_agents_not_ready_past_the_progress_deadline_are_named() -> None:
    """Agents never Ready past progressDeadlineSeconds make the pool Degraded AgentsNotReady,
    saying how many, the oldest's wait and their names, oldest first; within it, not."""
    stuck = [ObservedAgent(f"s{n}", created_at=NOW - 100 - n * 30) for n in range(7)]
    within = compute_status(PoolPolicy(progress_deadline_seconds=600), stuck, (), NOW)
    assert within.conditions[1].status == "False"
    past = compute_status(PoolPolicy(progress_deadline_seconds=60), stuck, (), NOW)
    degraded = past.conditions[1]
    assert (degraded.status, degraded.reason) == ("True", "AgentsNotReady")
    assert degraded.message == (
        "7 agents are not Ready past progressDeadlineSeconds (60s), the oldest for over 4 min: "
        "s6, s5, s4, s3, s2 and 2 more"
    )


def test_a_message_of_agents_not_ready_changes_at_most_once_a_minute() -> None:
    """The wait is told in whole minutes, so the status is not rewritten on every pass."""
    stuck = [ObservedAgent("s", created_at=NOW - 125)]
    policy = PoolPolicy(progress_deadline_seconds=30)
    messages = {
        compute_status(policy, stuck, (), NOW + second).conditions[1].message
        for second in range(0, 50)
    }
    assert len(messages) == 1
    young = compute_status(policy, [ObservedAgent("y", created_at=NOW - 40)], (), NOW)
    assert "the oldest for over 30s: y" in young.conditions[1].message


def test_unschedulable_outranks_other_trouble() -> None:
    """With several troubles, the reason is the most telling one: Unschedulable first."""
    agents = [ObservedAgent("f", failed=True), ObservedAgent("u", unschedulable=True)]
    status = compute_status(PoolPolicy(min_size=2, max_size=2), agents, (), NOW)
    assert status.conditions[1].reason == "Unschedulable"


def test_cold_start_is_median_of_created_to_ready() -> None:
    """The measured cold start is the median time from pod creation to first Ready."""
    agents = [
        ObservedAgent("a", created_at=0.0, ready=True, ready_at=2.0),
        ObservedAgent("b", created_at=10.0, ready=True, ready_at=14.0),
        ObservedAgent("c", created_at=20.0, ready=True, ready_at=29.0),
        ObservedAgent("p", created_at=30.0),
    ]
    assert compute_status(PoolPolicy(), agents, (), NOW).cold_start_seconds == 4.0
    assert compute_status(PoolPolicy(), agents[:2], (), NOW).cold_start_seconds == 3.0
    assert compute_status(PoolPolicy(), [], (), NOW).cold_start_seconds is None


def test_recommendation_from_history() -> None:
    """maxSize covers the peak demand in the window, minSize the median; old samples drop out."""
    history = [
        DemandSample(at=NOW - 7200, busy=50, waiting=50),  # outside the window
        DemandSample(at=NOW - 300, busy=2, waiting=0),
        DemandSample(at=NOW - 200, busy=4, waiting=3),
        DemandSample(at=NOW - 100, busy=3, waiting=0),
    ]
    status = compute_status(
        PoolPolicy(), [ready("a", is_busy=True)], (), NOW, history=history, window_seconds=3600
    )
    rec = status.recommendation
    assert rec is not None
    # Demands in the window: 2, 7, 3 and the current 1.
    assert (rec.min_size, rec.max_size, rec.peak_demand, rec.samples) == (3, 7, 7, 4)


def test_recommend_without_samples() -> None:
    """No demand observed yet: no recommendation."""
    assert recommend([], now=NOW, window=60) is None


def crash(name: str) -> PodFailure:
    return PodFailure(name, "CrashLoopBackOff", f"agent {name} exited with code 1: no model")


@pytest.mark.parametrize(
    ("failures", "count", "message"),
    [
        (
            [crash("p-1")],
            1,
            "agent p-1 exited with code 1: no model (1 agent failed before turning Ready: p-1)",
        ),
        (
            [crash("p-1"), crash("p-2")],
            2,
            "agent p-2 exited with code 1: no model"
            " (2 agents failed before turning Ready: p-1, p-2)",
        ),
        # Five pods are named, the newest; the rest are counted.
        (
            [crash(f"p-{n}") for n in range(3, 8)],
            7,
            "agent p-7 exited with code 1: no model"
            " (7 agents failed before turning Ready: p-3, p-4, p-5, p-6, p-7 and 2 more)",
        ),
        (
            [PodFailure("p-9", "NoLocalCommand", "give a command")],
            4,
            "give a command (4 agents failed before turning Ready: p-9 and 3 more)",
        ),
    ],
)
def test_start_failures_name_the_pods_and_the_last_cause(
    failures: list[PodFailure], count: int, message: str
) -> None:
    """Degraded after agents failed before turning Ready: the newest failure's reason and cause,
    the count, and the names of up to five of the pods, so `kubectl logs POD` can be run."""
    condition = start_failure_condition(failures, count=count)
    assert (condition.type, condition.status, condition.reason) == (
        "Degraded",
        "True",
        failures[-1].reason,
    )
    assert condition.message == message
