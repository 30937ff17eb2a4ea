"""What a pass reports: the status body, the agents by state, demand samples, when to write,
and when the next pass runs."""

from __future__ import annotations

from typing import Any

import pytest

from agentpool.pool import DemandSample, ObservedAgent, PoolPolicy, PoolStatusView, SizingAdvice
from agentpool.pool.passes import pass_delay, scaled_down
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
