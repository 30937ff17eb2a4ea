"""Agents whose container runs but whose readiness probe keeps failing: when the pool says so,
which agents it names, and the probe error it repeats from their Unhealthy Events."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentpool.api.conditions import ConditionView
from agentpool.api.raw import RawEvent
from agentpool.pool import ObservedAgent
from agentpool.pool.probing import (
    events_due,
    failing_agents,
    probe_errors,
    probe_failure_condition,
    probe_threshold,
    with_probe_failures,
)

NOW = 10_000.0
REFUSED = (
    'Readiness probe failed: Get "http://127.0.0.5:8080/healthz": dial tcp 127.0.0.5:8080: '
    "connect: connection refused"
)


def running(name: str, seconds: float, **fields: Any) -> ObservedAgent:
    """An agent never Ready whose container has run for ``seconds``."""
    return ObservedAgent(name, created_at=NOW - seconds - 2, running_since=NOW - seconds, **fields)


def event(pod: str, message: str, at: str, *, kind: str = "Pod") -> RawEvent:
    return {
        "involvedObject": {"kind": kind, "name": pod},
        "reason": "Unhealthy",
        "message": message,
        "lastTimestamp": at,
    }


@pytest.mark.parametrize(
    ("cold_start", "deadline", "threshold"),
    [
        (None, 600.0, 60.0),  # a new pool: nothing measured, the floor
        (10.0, 600.0, 60.0),  # a quick agent: still the floor
        (45.0, 600.0, 90.0),  # twice the measured cold start
        (40.2, 600.0, 81.0),  # whole seconds, rounded up
        (400.0, 600.0, 600.0),  # never past progressDeadlineSeconds
        (None, 30.0, 30.0),  # a deadline below the floor wins
    ],
)
def test_the_threshold_is_twice_the_cold_start_within_the_floor_and_the_deadline(
    cold_start: float | None, deadline: float, threshold: float
) -> None:
    """Slow starters get twice their measured start-up, a new pool a minute, never more than
    the progress deadline."""
    assert probe_threshold(cold_start, deadline=deadline, floor=60.0) == threshold


@given(
    cold_start=st.none() | st.floats(min_value=0, max_value=1e6),
    deadline=st.integers(min_value=1, max_value=100_000),
    floor=st.integers(min_value=1, max_value=1000),
)
def test_the_threshold_never_passes_the_deadline_nor_falls_below_floor_or_deadline(
    cold_start: float | None, deadline: int, floor: int
) -> None:
    """Whatever was measured, AgentsNotReady at the deadline is never preceded by silence."""
    threshold = probe_threshold(cold_start, deadline=deadline, floor=floor)
    assert min(floor, deadline) <= threshold <= deadline


@pytest.mark.parametrize(
    ("agent", "failing"),
    [
        (running("late", 61.0), True),
        (running("on-time", 60.0), True),
        (running("early", 59.0), False),
        (ObservedAgent("creating", created_at=NOW - 300), False),  # no container running yet
        (running("ready", 300.0, ready=True, ready_at=NOW - 200), False),
        (running("was-ready", 300.0, ready_at=NOW - 200), False),  # turned unready: retired
        (running("crashing", 300.0, waiting_reason="CrashLoopBackOff"), False),
        (running("failed", 300.0, failed=True), False),
        (running("leaving", 300.0, deleting=True), False),
    ],
)
def test_only_a_running_agent_never_ready_past_the_threshold_is_failing(
    agent: ObservedAgent, failing: bool
) -> None:
    """An agent is named when its container ran past the threshold without turning Ready;
    one still being created, Ready, crash-looping or leaving is someone else's report."""
    assert bool(failing_agents([agent], now=NOW, threshold=60.0)) is failing


def test_failing_agents_come_oldest_container_first() -> None:
    agents = [running("b", 100.0), running("a", 200.0), running("c", 100.0)]
    names = [agent.name for agent in failing_agents(agents, now=NOW, threshold=60.0)]
    assert names == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("failing", "listed_at", "due"),
    [
        (False, None, False),  # a healthy pool lists nothing
        (False, NOW - 60, False),
        (True, None, True),  # the first agent past the threshold: at once
        (True, NOW - 5, False),  # at most once every 15 s
        (True, NOW - 15, True),
    ],
)
def test_events_are_listed_only_for_failing_agents_and_at_most_every_period(
    failing: bool, listed_at: float | None, due: bool
) -> None:
    assert events_due(failing, listed_at=listed_at, now=NOW, every=15.0) is due


def test_the_newest_readiness_failure_of_each_agent_is_its_error() -> None:
    """Each agent's error is its newest readiness message; other pods' Events, other kinds'
    and liveness failures (when a readiness one is there) are left aside."""
    events = [
        event("a", "Readiness probe failed: HTTP probe failed with statuscode: 503", "T10:00:01Z"),
        event("a", REFUSED, "T10:00:05Z"),
        event("a", "Liveness probe failed: timed out", "T10:00:09Z"),
        event("b", "Liveness probe failed: timed out", "T10:00:09Z"),
        event("other", REFUSED, "T10:00:09Z"),
        event("a", "not a pod", "T10:00:10Z", kind="Node"),
    ]
    assert probe_errors(events, agents=["a", "b"]) == {
        "a": REFUSED,
        "b": "Liveness probe failed: timed out",
    }


@pytest.mark.parametrize(
    ("names", "errors", "message"),
    [
        (
            ["pool-a"],
            {"pool-a": REFUSED},
            f"agent pool-a has run for over 60s without turning Ready; {REFUSED}",
        ),
        (
            ["pool-a"],
            {},
            "agent pool-a has run for over 60s without turning Ready; no Unhealthy Event says "
            "why yet: kubectl describe pod pool-a",
        ),
        (
            ["pool-a", "pool-b"],
            {"pool-b": REFUSED},
            "2 agents have run for over 60s without turning Ready: pool-a, pool-b; pool-b: "
            + REFUSED,
        ),
        (
            [f"pool-{n}" for n in range(7)],
            {"pool-0": "Readiness probe failed: HTTP probe failed with statuscode: 503"},
            "7 agents have run for over 60s without turning Ready: pool-0, pool-1, pool-2, "
            "pool-3, pool-4 and 2 more; pool-0: Readiness probe failed: HTTP probe failed with "
            "statuscode: 503",
        ),
    ],
)
def test_the_condition_names_the_agents_and_the_probe_error(
    names: list[str], errors: dict[str, str], message: str
) -> None:
    """Degraded ReadinessFailing names at most five agents, counts the rest, and repeats the
    probe's last error, or says where to look while no Event is there yet."""
    failing = [running(name, 90.0) for name in names]
    condition = probe_failure_condition(failing, errors, threshold=60.0)
    assert (condition.type, condition.status, condition.reason) == (
        "Degraded",
        "True",
        "ReadinessFailing",
    )
    assert condition.message == message


@pytest.mark.parametrize(
    ("degraded", "replaced"),
    [
        (ConditionView("Degraded", "False", "AsExpected", "every agent is starting"), True),
        (ConditionView("Degraded", "True", "CrashLoopBackOff", "crashing"), False),
    ],
)
def test_a_probe_failure_replaces_only_a_degraded_that_saw_nothing_wrong(
    degraded: ConditionView, replaced: bool
) -> None:
    failure = probe_failure_condition([running("a", 90.0)], {}, threshold=60.0)
    ready = ConditionView("Ready", "False", "AgentsStarting", "0 of 1 agent ready")
    conditions = with_probe_failures([ready, degraded], failure, told=("a", REFUSED))
    assert conditions == [ready, failure if replaced else degraded]
    assert with_probe_failures([ready, degraded], None) == [ready, degraded]


@pytest.mark.parametrize(
    ("told", "message"),
    [
        (("a", REFUSED), f"1 agent is not Ready past 600s: a; last probe error, of a: {REFUSED}"),
        (None, "1 agent is not Ready past 600s: a"),
    ],
)
def test_past_the_deadline_agents_not_ready_stays_and_repeats_the_probe_error(
    told: tuple[str, str] | None, message: str
) -> None:
    """AgentsNotReady, which takes over at progressDeadlineSeconds, keeps telling why."""
    late = ConditionView("Degraded", "True", "AgentsNotReady", "1 agent is not Ready past 600s: a")
    failure = probe_failure_condition([running("a", 900.0)], {}, threshold=600.0)
    (degraded,) = with_probe_failures([late], failure, told=told)
    assert (degraded.reason, degraded.message) == ("AgentsNotReady", message)
