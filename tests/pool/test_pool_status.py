"""Pool status: poolboy's state, the counts, the conditions and the sizing advice."""

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

NOW = 1000.0


def ready(name: str, *, is_busy: bool = False, created_at: float = 0.0) -> ObservedAgent:
    return ObservedAgent(
        name, created_at=created_at, ready=True, ready_at=created_at + 2.0, busy=is_busy
    )


@pytest.mark.parametrize(
    ("available", "overflow", "max_overflow", "state"),
    [
        # No overflow in use: Ready while a worker is idle ...
        (1, 0, 0, "Ready"),
        (3, 0, 2, "Ready"),
        # ... else Full when the pool may not overflow, Overflow when it may.
        (0, 0, 0, "Full"),
        (0, 0, 2, "Overflow"),
        # Overflow in use: Full once it reaches max_overflow, Overflow before.
        (0, 1, 2, "Overflow"),
        (2, 1, 2, "Overflow"),
        (0, 2, 2, "Full"),
        (1, 2, 2, "Full"),
        # maxSize lowered below the live agents: still Full.
        (0, 3, 2, "Full"),
    ],
)
def test_state_name_matches_poolboy(
    available: int, overflow: int, max_overflow: int, state: str
) -> None:
    """Every branch of poolboy's state_name gives the same answer here."""
    assert state_name(available=available, overflow=overflow, max_overflow=max_overflow) == state


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
    ) == (4, 3, 1, 2, 2, 2, "Overflow")


def test_state_full_when_every_agent_busy_at_max() -> None:
    """A pool at maxSize with every agent busy is Full."""
    policy = PoolPolicy(min_size=1, max_size=2)
    status = compute_status(policy, [ready("a", is_busy=True), ready("b", is_busy=True)], (), NOW)
    assert status.state == "Full"


def test_ready_condition_follows_min_size() -> None:
    """Ready is False while fewer than minSize agents are Ready, True once they are."""
    policy = PoolPolicy(min_size=2, max_size=2)
    starting = compute_status(policy, [ready("a"), ObservedAgent("p")], (), NOW)
    assert (starting.conditions[0].type, starting.conditions[0].status) == ("Ready", "False")
    assert starting.conditions[0].reason == "AgentsStarting"
    assert "1 of 2" in starting.conditions[0].message
    up = compute_status(policy, [ready("a"), ready("b")], (), NOW)
    assert (up.conditions[0].status, up.conditions[0].reason) == ("True", "AgentsReady")


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
    status = compute_status(PoolPolicy(), [ready("a"), ObservedAgent("p")], (), NOW)
    assert (status.conditions[1].status, status.conditions[1].reason) == ("False", "AsExpected")


def test_readiness_failing_after_grace() -> None:
    """A running pod never Ready past the grace period is reported as failing readiness."""
    stuck = ObservedAgent("stuck", created_at=NOW - 120)
    policy = PoolPolicy()
    within = compute_status(policy, [stuck], (), NOW, readiness_grace_seconds=300)
    assert within.conditions[1].status == "False"
    past = compute_status(policy, [stuck], (), NOW, readiness_grace_seconds=60)
    assert (past.conditions[1].status, past.conditions[1].reason) == ("True", "ReadinessFailing")


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
