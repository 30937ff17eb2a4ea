"""Automatic headroom: minIdle follows the advice within its bounds, no faster than its rate,
and never flaps on advice that wavers within the tolerance."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentpool.api import Headroom
from agentpool.pool.headroom import (
    HeadroomState,
    decide_headroom,
    desired_min_idle,
    restored_state,
)

AUTO = Headroom(mode="Auto", max_step_per_minute=2, scale_down_stabilization_seconds=300)


def follow(
    headroom: Headroom,
    steps: list[tuple[float, int | None]],
    *,
    floor: int = 0,
    ceiling: int = 20,
    state: HeadroomState | None = None,
) -> list[tuple[float, int]]:
    """minIdle after each (seconds later, advice) step, with when it was decided."""
    state = state or HeadroomState()
    now, seen = 1000.0, []
    for delay, advice in steps:
        now += delay
        decision = decide_headroom(
            headroom, state, advice=advice, floor=floor, ceiling=ceiling, now=now
        )
        state = decision.state
        seen.append((now, decision.min_idle))
    return seen


def test_advise_keeps_the_spec_min_idle() -> None:
    """Advise (the default) changes nothing, whatever the advice."""
    assert follow(Headroom(), [(10, 9), (10, 9)], floor=1) == [(1010.0, 1), (1020.0, 1)]


def test_a_rise_is_followed_at_the_stated_rate() -> None:
    """Advice of 5 from 0 at 2 a minute: 2 at once, 4 a minute later, then 5."""
    values = [v for _, v in follow(AUTO, [(1, 5), (30, 5), (30, 5), (60, 5)])]
    assert values == [2, 2, 4, 5]


def test_a_dip_shorter_than_the_scale_down_window_keeps_the_headroom() -> None:
    """A lull of two minutes inside the five-minute scale-down window gives nothing back; a
    lull past it does."""
    rise = [(1, 4), (61, 4)]
    lull = [(60, 0), (60, 0)]
    values = [v for _, v in follow(AUTO, [*rise, *lull])]
    assert values[-1] == 4
    values = [v for _, v in follow(AUTO, [*rise, *lull, (60, 0), (60, 0), (61, 0)])]
    assert values[-1] == 2


def test_the_bounds_apply_at_once() -> None:
    """A ceiling lowered below minIdle (maxSize - minSize shrank) brings it down at once, and a
    floor raised (a schedule opened) lifts it at once, rate or not."""
    state = decide_headroom(AUTO, HeadroomState(), advice=2, floor=0, ceiling=9, now=0).state
    assert state.min_idle == 2
    lowered = decide_headroom(AUTO, state, advice=2, floor=0, ceiling=1, now=1)
    assert lowered.min_idle == 1
    raised = decide_headroom(AUTO, state, advice=2, floor=7, ceiling=9, now=1)
    assert raised.min_idle == 7


def test_each_change_says_what_it_came_from() -> None:
    """The Event's message carries the advice, the bounds and the rate."""
    decision = decide_headroom(AUTO, HeadroomState(), advice=3, floor=0, ceiling=5, now=0)
    assert decision.message == (
        "minIdle 0 -> 2: advice 3 (peak minus median demand), bounds 0..5, at most 2 a minute"
    )
    again = decide_headroom(AUTO, decision.state, advice=2, floor=0, ceiling=5, now=1)
    assert again.message is None


def test_the_advice_is_the_gap_between_peak_and_median() -> None:
    assert desired_min_idle(peak_demand=7, median_demand=3) == 4
    assert desired_min_idle(peak_demand=3, median_demand=3) == 0


STEPS = st.lists(
    st.tuples(st.floats(0.5, 90), st.one_of(st.none(), st.integers(0, 30))), max_size=60
)
HEADROOMS = st.builds(
    Headroom,
    mode=st.just("Auto"),
    max_step_per_minute=st.integers(1, 5),
    tolerance=st.integers(0, 3),
    scale_up_stabilization_seconds=st.integers(0, 300),
    scale_down_stabilization_seconds=st.integers(0, 600),
)


@settings(max_examples=300, deadline=None)
@given(headroom=HEADROOMS, steps=STEPS, floor=st.integers(0, 5), span=st.integers(0, 15))
def test_never_faster_than_the_rate_nor_outside_the_bounds(
    headroom: Headroom, steps: list[tuple[float, int | None]], floor: int, span: int
) -> None:
    """In any 60 seconds minIdle moves at most maxStepPerMinute in all, and always stays
    within floor..ceiling."""
    seen = follow(headroom, steps, floor=floor, ceiling=floor + span)
    values = [floor, *(v for _, v in seen)]
    times = [999.0, *(t for t, _ in seen)]
    for _, value in seen:
        assert floor <= value <= floor + span
    for i, start in enumerate(times):
        moved = sum(
            abs(values[j] - values[j - 1])
            for j in range(i + 1, len(values))
            if times[j] - start < 60
        )
        assert moved <= headroom.max_step_per_minute


@settings(max_examples=300, deadline=None)
@given(
    headroom=HEADROOMS,
    level=st.integers(3, 10),
    wobble=st.lists(st.tuples(st.floats(0.5, 120), st.integers(-3, 3)), max_size=60),
)
def test_advice_within_the_tolerance_never_moves_it(
    headroom: Headroom, level: int, wobble: list[tuple[float, int]]
) -> None:
    """Settled at a level, advice that wavers within the tolerance around it changes nothing:
    no flapping."""
    state = HeadroomState(min_idle=level)
    steps: list[tuple[float, int | None]] = [
        (delay, level + max(-headroom.tolerance, min(headroom.tolerance, offset)))
        for delay, offset in wobble
    ]
    assert all(value == level for _, value in follow(headroom, steps, state=state))


@settings(max_examples=200, deadline=None)
@given(headroom=HEADROOMS, advice=st.integers(0, 20), start=st.integers(0, 20))
def test_steady_advice_is_reached(headroom: Headroom, advice: int, start: int) -> None:
    """Advice held long enough is reached (to within the tolerance), whatever the start."""
    state = HeadroomState(min_idle=start)
    seen = follow(headroom, [(61, advice)] * 40, state=state)
    assert abs(seen[-1][1] - advice) <= headroom.tolerance


def test_a_spike_shorter_than_the_scale_up_window_is_not_followed() -> None:
    """With a two-minute scale-up window, one pass of high advice raises nothing; advice high
    for the whole window does."""
    headroom = Headroom(mode="Auto", max_step_per_minute=5, scale_up_stabilization_seconds=120)
    spike = [(10, 1), (10, 5), (10, 1)]
    assert follow(headroom, spike)[-1][1] == 1
    held = [(10, 1), *[(30, 5)] * 5]
    assert follow(headroom, held)[-1][1] == 5


@pytest.mark.parametrize("stored", [None, "3", True, -1, 2.5, [3]])
def test_a_status_with_no_usable_min_idle_restores_a_new_pools_state(stored: object) -> None:
    """Whatever a user or an older operator left in status.effectiveMinIdle, a restart only
    carries on from a count."""
    assert restored_state(stored, 100.0) == HeadroomState()


def test_a_restart_carries_on_from_the_min_idle_status_showed() -> None:
    state = restored_state(3, 100.0)
    assert state.min_idle == 3
    assert state.advice == ((100.0, 3),)
