"""What a pass reports: the status body, the agents by state, demand samples, when to write,
and when the next pass runs."""

from __future__ import annotations

from typing import Any

import pytest

from agentpool.pool import DemandSample, ObservedAgent, PoolPolicy, PoolStatusView, SizingAdvice
from agentpool.pool.passes import pass_delay, scaled_down, steady
from agentpool.pool.report import (
    AGENT_STATES,
    agent_states,
    sample_demand,
    status_body,
    write_delay,
)

NOW = 10_000.0


@pytest.mark.parametrize(
    ("history", "kept"),
    [
        ([], [NOW]),
        ([DemandSample(at=NOW - 5, busy=1, waiting=0)], [NOW - 5]),
        ([DemandSample(at=NOW - 10, busy=1, waiting=0)], [NOW - 10, NOW]),
        (
            [
                DemandSample(at=NOW - 4000, busy=1, waiting=0),
                DemandSample(at=NOW - 20, busy=0, waiting=0),
            ],
            [NOW - 20, NOW],
        ),
    ],
)
def test_demand_is_sampled_every_ten_seconds_over_the_window(
    history: list[DemandSample], kept: list[float]
) -> None:
    """A sample is taken once `every` seconds passed; samples past the window are dropped."""
    sampled = sample_demand(history, busy=2, waiting=1, now=NOW, every=10.0, window=3600.0)
    assert [sample.at for sample in sampled] == kept


def test_a_quiet_gap_is_filled_with_the_samples_its_passes_would_have_taken() -> None:
    """A steady pool passes a minute apart; no slot was busy meanwhile, so the sizing advice
    sees the idle minute as six samples at no demand, as a pass every ten seconds would have."""
    history = [DemandSample(at=NOW - 60, busy=3, waiting=0)]
    sampled = sample_demand(
        history, busy=0, waiting=0, now=NOW, every=10.0, window=3600.0, quiet=True
    )
    assert [sample.at for sample in sampled] == [NOW - 60 + 10 * k for k in range(7)]
    assert [sample.demand for sample in sampled] == [3, 0, 0, 0, 0, 0, 0]
    loud = sample_demand(history, busy=0, waiting=0, now=NOW, every=10.0, window=3600.0)
    assert [sample.at for sample in loud] == [NOW - 60, NOW]


def test_the_checkout_that_wakes_a_quiet_pool_is_not_its_sample() -> None:
    """A quiet pool woken by a checkout is sampled at that very moment, busy: were that taken
    as a sample, a pool busy for half a second every 15 s would look busy all the time. Its
    demand counts from the next samples on; the gap before it was idle."""
    history = [DemandSample(at=NOW - 15, busy=0, waiting=0)]
    sampled = sample_demand(
        history, busy=1, waiting=0, now=NOW, every=10.0, window=3600.0, quiet=True
    )
    assert [(sample.at, sample.demand) for sample in sampled] == [(NOW - 15, 0), (NOW - 5, 0)]


def test_a_quiet_gap_longer_than_the_window_fills_the_window_only() -> None:
    """After days with no pass, the filled samples stay within the window."""
    history = [DemandSample(at=NOW - 86_400, busy=1, waiting=0)]
    sampled = sample_demand(
        history, busy=0, waiting=0, now=NOW, every=10.0, window=100.0, quiet=True
    )
    assert [sample.at for sample in sampled] == [NOW - 90 + 10 * k for k in range(10)]


def test_status_body_is_the_view_in_wire_form() -> None:
    """camelCase fields, rounded cold start, and no field for what the view does not know."""
    view = PoolStatusView(
        replicas=3,
        ready_replicas=2,
        available=1,
        busy=1,
        overflow=0,
        waiting=0,
        state="Ready",
        recommendation=SizingAdvice(
            min_size=1, max_size=4, peak_demand=4, median_demand=1, samples=9, window_seconds=3600.0
        ),
        cold_start_seconds=1.23456,
    )
    body = status_body(view, PoolPolicy(min_size=1, max_size=3), selector="s", generation=7)
    assert body["readyReplicas"] == 2
    assert body["maxSize"] == 3
    assert body["observedGeneration"] == 7
    assert body["recommendation"] == {"minSize": 1, "maxSize": 4}
    assert body["coldStartSeconds"] == 1.235
    bare = status_body(
        PoolStatusView(0, 0, 0, 0, 0, 0, "ScaledToZero"),
        PoolPolicy(min_size=0, max_size=3),
        selector="s",
        generation=None,
    )
    assert "recommendation" not in bare
    assert "observedGeneration" not in bare


@pytest.mark.parametrize(
    ("agent", "state"),
    [
        (ObservedAgent("a", ready=True), "idle"),
        (ObservedAgent("a", ready=True, busy=True), "busy"),
        (ObservedAgent("a"), "starting"),
        (ObservedAgent("a", ready_at=1.0), "unready"),
        (ObservedAgent("a", ready=True, busy=True, deleting=True), "retiring"),
        (ObservedAgent("kept", failed=True), None),
    ],
)
def test_agents_are_counted_by_state(agent: ObservedAgent, state: str | None) -> None:
    """Each agent counts once, retiring before busy before idle; a kept pod not at all."""
    counts = agent_states([agent], kept={"kept"})
    assert set(counts) == set(AGENT_STATES)
    assert {name for name, count in counts.items() if count} == ({state} if state else set())


SAME: dict[str, Any] = {"state": "Ready"}


@pytest.mark.parametrize(
    ("last", "since", "delay"),
    [
        (SAME, 5.0, None),  # nothing new
        ({"state": "Full"}, 5.0, 0.0),  # new, and the last write is old enough
        ({"state": "Full"}, 1.0, 0.0),
        ({"state": "Full"}, 0.25, 0.75),  # new, but a write went out a moment ago
        (None, 0.0, 1.0),
    ],
)
def test_status_writes_are_coalesced(
    last: dict[str, Any] | None, since: float, delay: float | None
) -> None:
    """A status is written when it changed, at most once per interval."""
    assert write_delay(dict(SAME), last=last, since_last=since, interval=1.0) == delay


@pytest.mark.parametrize(
    ("policy", "waiting", "delay"),
    [
        (PoolPolicy(min_size=2, max_size=2), 0, 5.0),
        (PoolPolicy(min_size=2, max_size=2), 2, 1.0),
        (PoolPolicy(min_size=1, max_size=3), 0, 1.0),  # overflow
        (PoolPolicy(min_size=2, max_size=2, max_lifetime_seconds=60), 0, 1.0),
    ],
)
def test_timed_rules_make_passes_come_every_second(
    policy: PoolPolicy, waiting: int, delay: float
) -> None:
    """Overflow, lifetimes and waiters are honoured to the second; otherwise every 5 s."""
    assert pass_delay(policy, waiting=waiting, idle=5.0, timed=1.0) == delay


def test_scale_downs_are_told_from_replacements() -> None:
    """Only idle timeouts and scale-downs shrink the pool."""
    done = [("a", "IdleTimeout"), ("b", "ScaledDown"), ("c", "Failed"), ("d", "MaxUses")]
    assert scaled_down(done) == 2


SETTLED = [
    {"type": "Ready", "status": "True", "reason": "AgentsReady"},
    {"type": "Degraded", "status": "False", "reason": "AsExpected"},
    {"type": "Progressing", "status": "True", "reason": "RolloutComplete"},
]
STEADY_POLICY = PoolPolicy(min_size=2, max_size=2)


def idle_agent(name: str, **fields: Any) -> ObservedAgent:
    return ObservedAgent(name=name, ready=True, ready_at=1.0, **fields)


@pytest.mark.parametrize(
    ("policy", "agents", "conditions", "waiting", "pending", "expected"),
    [
        (STEADY_POLICY, [idle_agent("a"), idle_agent("b")], SETTLED, 0, False, True),
        (STEADY_POLICY, [idle_agent("a"), idle_agent("b", busy=True)], SETTLED, 0, False, False),
        (STEADY_POLICY, [idle_agent("a"), ObservedAgent(name="b")], SETTLED, 0, False, False),
        (
            STEADY_POLICY,
            [idle_agent("a"), idle_agent("b", deleting=True)],
            SETTLED,
            0,
            False,
            False,
        ),
        (STEADY_POLICY, [idle_agent("a"), idle_agent("b")], SETTLED, 1, False, False),
        (STEADY_POLICY, [idle_agent("a"), idle_agent("b")], SETTLED, 0, True, False),
        (PoolPolicy(min_size=1, max_size=3), [idle_agent("a")], SETTLED, 0, False, False),
        (
            STEADY_POLICY,
            [idle_agent("a"), idle_agent("b")],
            [*SETTLED[:1], {"type": "Degraded", "status": "True", "reason": "ReadinessFailing"}],
            0,
            False,
            False,
        ),
        (
            STEADY_POLICY,
            [idle_agent("a"), idle_agent("b")],
            [{"type": "Progressing", "status": "True", "reason": "RollingOut"}],
            0,
            False,
            False,
        ),
    ],
    ids=[
        "all-ready-and-free",
        "one-busy",
        "one-starting",
        "one-retiring",
        "a-waiter",
        "pods-to-create-or-delete",
        "overflow",
        "degraded",
        "rolling-out",
    ],
)
def test_only_a_pool_no_rule_of_time_can_change_is_steady(
    policy: PoolPolicy,
    agents: list[ObservedAgent],
    conditions: list[dict[str, str]],
    waiting: int,
    pending: bool,
    expected: bool,
) -> None:
    """Steady: every agent Ready, sound and free, nothing pending or troubled, no timed rule."""
    found = steady(policy, agents, conditions=conditions, waiting=waiting, pending=pending)
    assert found is expected


def test_a_steady_pool_is_looked_at_once_a_minute() -> None:
    """The quiet delay applies to a steady pool only, and never undercuts the idle one."""
    policy = PoolPolicy(min_size=2, max_size=2)
    assert pass_delay(policy, waiting=0, idle=5.0, timed=1.0, quiet=60.0, steady=True) == 60.0
    assert pass_delay(policy, waiting=0, idle=5.0, timed=1.0, quiet=60.0, steady=False) == 5.0
    assert pass_delay(policy, waiting=0, idle=5.0, timed=1.0, quiet=1.0, steady=True) == 5.0
    assert pass_delay(policy, waiting=2, idle=5.0, timed=1.0, quiet=60.0, steady=True) == 1.0
