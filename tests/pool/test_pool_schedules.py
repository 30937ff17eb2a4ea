"""Warm schedules: which windows are open at an instant, the sizes in force, the next edge, and
the refusal of cron expressions and time zones that cannot work."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentpool.api import AgentPoolSpec, SpecError, WarmSchedule, parse_spec
from agentpool.pool import PoolPolicy
from agentpool.pool.schedules import open_until, warmth

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def at(year: int, month: int, day: int, hour: int, minute: int = 0, *, zone: Any = UTC) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=zone).timestamp()


def pool(*schedules: dict[str, Any], **fields: Any) -> AgentPoolSpec:
    return parse_spec(AgentPoolSpec, {"image": "agent", **fields, "schedules": list(schedules)})


BUSINESS = {
    "name": "business-hours",
    "start": "0 9 * * 1-5",
    "end": "0 17 * * 1-5",
    "timeZone": "Europe/Berlin",
    "minSize": 5,
}


@pytest.mark.parametrize(
    ("when", "open_", "min_size"),
    [
        # Friday 4 December 2026, Berlin wall clock
        (at(2026, 12, 4, 8, 59, zone=BERLIN), (), 1),
        (at(2026, 12, 4, 9, 0, zone=BERLIN), ("business-hours",), 5),
        (at(2026, 12, 4, 16, 59, zone=BERLIN), ("business-hours",), 5),
        (at(2026, 12, 4, 17, 0, zone=BERLIN), (), 1),
        # Saturday: no window opens
        (at(2026, 12, 5, 12, 0, zone=BERLIN), (), 1),
    ],
)
def test_a_window_is_open_from_start_until_end(
    when: float, open_: tuple[str, ...], min_size: int
) -> None:
    """Business hours in Berlin raise minSize from 09:00 to 17:00 on weekdays, no longer."""
    warm = warmth(pool(BUSINESS), when)
    assert warm.open == open_
    assert warm.min_size == min_size


def test_the_next_edge_is_the_next_open_or_close() -> None:
    """The reconciler looks again when the window closes, and on Friday evening, at Monday's
    opening."""
    spec = pool(BUSINESS)
    assert warmth(spec, at(2026, 12, 4, 10, zone=BERLIN)).next_edge == at(
        2026, 12, 4, 17, zone=BERLIN
    )
    assert warmth(spec, at(2026, 12, 4, 18, zone=BERLIN)).next_edge == at(
        2026, 12, 7, 9, zone=BERLIN
    )


def test_a_window_with_a_duration_closes_that_long_after_it_opened() -> None:
    """durationSeconds counts from each opening: 30 minutes from every hour on the hour."""
    spec = pool({"name": "top", "start": "0 * * * *", "durationSeconds": 1800, "minIdle": 3})
    assert warmth(spec, at(2026, 1, 1, 10, 29)).min_idle == 3
    assert warmth(spec, at(2026, 1, 1, 10, 30)).min_idle == 0
    assert warmth(spec, at(2026, 1, 1, 10, 30)).next_edge == at(2026, 1, 1, 11)


def test_the_effective_sizes_are_the_largest_of_spec_and_open_windows() -> None:
    """Overlapping windows do not add up: each size is the largest asked for."""
    spec = pool(
        {"name": "a", "start": "0 9 * * *", "durationSeconds": 7200, "minSize": 4, "minIdle": 1},
        {"name": "b", "start": "0 10 * * *", "durationSeconds": 7200, "minSize": 2, "minIdle": 6},
        minSize=3,
        minIdle=2,
    )
    warm = warmth(spec, at(2026, 1, 1, 10, 30))
    assert (warm.min_size, warm.min_idle, warm.open) == (4, 6, ("a", "b"))
    warm = warmth(spec, at(2026, 1, 1, 11, 30))
    assert (warm.min_size, warm.min_idle, warm.open) == (3, 6, ("b",))


def test_a_window_above_max_size_raises_the_ceiling() -> None:
    """A window asking for more agents than maxSize gets them: the ceiling follows."""
    spec = pool({"name": "a", "start": "0 9 * * *", "durationSeconds": 3600, "minSize": 8})
    policy = PoolPolicy.from_spec(spec, warmth=warmth(spec, at(2026, 1, 1, 9, 30)))
    assert (policy.min_size, policy.max_size) == (8, 8)
    policy = PoolPolicy.from_spec(spec, warmth=warmth(spec, at(2026, 1, 1, 11)))
    assert (policy.min_size, policy.max_size) == (1, 1)


def test_windows_follow_the_wall_clock_across_daylight_saving_changes() -> None:
    """09:00 in New York is 14:00 UTC in winter and 13:00 UTC after 8 March 2026; a window of
    one hour stays one hour long on the day the clocks go forward."""
    spec = pool(
        {"name": "am", "start": "0 9 * * *", "durationSeconds": 3600,
         "timeZone": "America/New_York", "minSize": 2}
    )  # fmt: skip
    assert warmth(spec, at(2026, 3, 7, 14, 30)).open == ("am",)
    assert warmth(spec, at(2026, 3, 8, 13, 30)).open == ("am",)
    assert warmth(spec, at(2026, 3, 8, 14, 30)).open == ()
    assert warmth(spec, at(2026, 3, 7, 14, 30)).next_edge == at(2026, 3, 7, 15)


def test_a_start_inside_the_skipped_hour_opens_when_the_clocks_jump() -> None:
    """02:30 does not exist in New York on 8 March 2026: the window opens at 03:00 instead, as
    cron does, and is open an hour from then."""
    spec = pool(
        {"name": "night", "start": "30 2 * * *", "durationSeconds": 3600,
         "timeZone": "America/New_York", "minSize": 2}
    )  # fmt: skip
    # 03:00 EDT is 07:00 UTC
    assert warmth(spec, at(2026, 3, 8, 6, 59)).open == ()
    assert warmth(spec, at(2026, 3, 8, 7, 0)).open == ("night",)
    assert warmth(spec, at(2026, 3, 8, 7, 59)).open == ("night",)
    assert warmth(spec, at(2026, 3, 8, 8, 0)).open == ()


def test_the_repeated_hour_in_autumn_keeps_a_window_opened_in_it() -> None:
    """01:30 happens twice in New York on 1 November 2026; the window opened at the first is
    open for its hour, whatever the wall clock reads."""
    spec = pool(
        {"name": "n", "start": "30 1 * * *", "durationSeconds": 3600,
         "timeZone": "America/New_York", "minSize": 2}
    )  # fmt: skip
    first = datetime(2026, 11, 1, 1, 30, tzinfo=NEW_YORK, fold=0).timestamp()
    assert warmth(spec, first + 59 * 60).open == ("n",)
    assert warmth(spec, first + 3 * 3600).open == ()


CRONS = st.sampled_from(
    ["0 9 * * 1-5", "*/15 * * * *", "30 2 * * *", "0 0 1 * *", "0 12 * * 0", "45 23 * * 6"]
)
ZONES = st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"])
INSTANTS = st.one_of(
    st.floats(min_value=at(2024, 1, 1, 0), max_value=at(2030, 1, 1, 0)),
    # a hair either side of whole minutes, where the edges are
    st.integers(28_000_000, 31_000_000)
    .map(lambda minute: minute * 60.0)
    .flatmap(lambda edge: st.sampled_from([edge, edge - 1e-6, edge + 1e-6, edge - 0.5])),
)


@settings(max_examples=150, deadline=None)
@given(start=CRONS, zone=ZONES, duration=st.integers(60, 3 * 86400), now=INSTANTS)
def test_nothing_changes_before_the_next_edge(
    start: str, zone: str, duration: int, now: float
) -> None:
    """Between now and the next edge the window stays as it is, and at the edge it changes or a
    new window opens: the reconciler can sleep until the edge without missing anything."""
    schedule = WarmSchedule(
        name="w", start=start, duration_seconds=duration, time_zone=zone, min_size=2
    )
    spec = AgentPoolSpec(image="agent", schedules=[schedule])
    warm = warmth(spec, now)
    assert warm.next_edge is not None
    assert warm.next_edge > now
    just_before = max(now, warm.next_edge - 0.5)
    assert warmth(spec, just_before).open == warm.open
    after = warmth(spec, warm.next_edge)
    assert after.open == ("w",) or warm.open == ("w",)


@settings(max_examples=150, deadline=None)
@given(start=CRONS, zone=ZONES, duration=st.integers(60, 86400), now=INSTANTS)
def test_an_open_window_closes_no_later_than_its_duration(
    start: str, zone: str, duration: int, now: float
) -> None:
    """A window open now closes within durationSeconds, whatever the zone does meanwhile."""
    schedule = WarmSchedule(
        name="w", start=start, duration_seconds=duration, time_zone=zone, min_size=1
    )
    closes = open_until(schedule, now)
    if closes is not None:
        assert now < closes <= now + duration


@pytest.mark.parametrize(
    ("schedule", "names"),
    [
        ({"start": "0 9 * *"}, ["spec.schedules[0].start", "five fields"]),
        ({"start": "0 25 * * *"}, ["spec.schedules[0].start", "Bad hour"]),
        ({"start": "0 0 30 2 *"}, ["spec.schedules[0].start", "day-of-month"]),
        ({"end": "61 * * * *", "durationSeconds": None}, ["spec.schedules[0].end", "minute"]),
        ({"timeZone": "Mars/Olympus"}, ["spec.schedules[0].timeZone", "IANA time zone"]),
        ({"timeZone": "../../etc/passwd"}, ["spec.schedules[0].timeZone", "IANA time zone"]),
    ],
)
def test_a_bad_cron_or_time_zone_is_refused_naming_the_field(
    schedule: dict[str, Any], names: list[str]
) -> None:
    """The message names the field and says what a valid value looks like."""
    raw = {"name": "w", "start": "0 9 * * *", "durationSeconds": 60, "minSize": 1, **schedule}
    with pytest.raises(SpecError) as caught:
        pool({k: v for k, v in raw.items() if v is not None})
    for name in names:
        assert name in str(caught.value)


def test_schedule_names_must_be_unique() -> None:
    """Two windows of one name would be told apart nowhere, status included."""
    window = {"name": "w", "start": "0 9 * * *", "durationSeconds": 60, "minSize": 1}
    with pytest.raises(SpecError, match="w is used more than once"):
        pool(window, window)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=40))
def test_any_text_as_cron_is_accepted_or_refused_clearly(text: str) -> None:
    """Whatever is written as start, validation either accepts it (and the window can then be
    evaluated) or refuses it naming spec.schedules[0].start: it never fails otherwise."""
    raw = {"name": "w", "start": text, "durationSeconds": 60, "minSize": 1}
    try:
        spec = pool(raw)
    except SpecError as error:
        refused = str(error)
    else:
        warmth(spec, at(2026, 1, 1, 0))
        return
    assert "spec.schedules[0].start" in refused


def test_a_duration_is_real_time_across_the_autumn_change() -> None:
    """A window of two hours opened at 00:30 on the night the clocks go back closes two hours
    later, at 01:30 the second time round, not three hours later by the wall clock."""
    spec = pool(
        {"name": "n", "start": "30 0 * * *", "durationSeconds": 7200,
         "timeZone": "America/New_York", "minSize": 2}
    )  # fmt: skip
    opened = datetime(2026, 11, 1, 0, 30, tzinfo=NEW_YORK).timestamp()
    assert warmth(spec, opened + 7199).open == ("n",)
    assert warmth(spec, opened + 7200).open == ()
    assert warmth(spec, opened + 60).next_edge == opened + 7200
