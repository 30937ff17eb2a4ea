"""Warm schedules: which of a pool's windows are open at an instant, and the sizes they ask for.

A window opens each time its ``start`` cron expression matches, read on the wall clock of its
time zone, and closes ``durationSeconds`` later or when its ``end`` expression next matches.
While windows are open the pool keeps the largest minSize and minIdle of the spec's and of
theirs. Everything here is a pure function of the spec and ``now`` (seconds since the epoch),
so the AgentPool reconciler passes the time in and tests pass any instant, across daylight
saving changes too. The reconciler also asks when the next window edge falls, and looks again
then.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import cronsim

from agentpool.api import AgentPoolSpec, WarmSchedule


@dataclass(frozen=True, slots=True)
class Warmth:
    """The sizes in force at an instant, the windows open then, and when that next changes."""

    min_size: int
    min_idle: int
    open: tuple[str, ...]
    """The names of the open windows, in the spec's order."""
    next_edge: float | None
    """When a window next opens or closes, in seconds since the epoch; None without windows."""


def _wall(now: float, zone: str) -> datetime:
    """``now`` on the wall clock of ``zone``, to the second below: cron matches fall on whole
    seconds, so which are before or after ``now`` is the same, and rounding to the microsecond
    can never carry ``now`` onto a match."""
    return datetime.fromtimestamp(math.floor(now), tz=ZoneInfo(zone))


#: More than any daylight saving shift: cron walks the wall clock, which in a repeated or a
#: skipped hour runs out of step with real time by up to this much, so searches start this far
#: beyond ``now`` and keep the matches that are really before (or after) it.
SLACK = timedelta(hours=3)


def _last_match(expression: str, now: datetime) -> datetime:
    """The latest instant at or before ``now`` that ``expression`` matches."""
    # Compared as timestamps: datetimes of one zone compare by wall clock, fold ignored.
    limit, best = now.timestamp(), None
    # Matches fall on whole seconds, so from a second past now the search finds now's own.
    for match in cronsim.CronSim(expression, now.replace(microsecond=0) + SLACK, reverse=True):
        at = match.timestamp()
        if best is not None and at < best.timestamp() - SLACK.total_seconds():
            return best
        if at <= limit and (best is None or at > best.timestamp()):
            best = match
    raise ValueError(f"{expression!r} never matches")  # pragma: no cover - cron repeats


def _next_match(expression: str, after: datetime) -> datetime:
    """The first instant strictly after ``after`` that ``expression`` matches."""
    limit, best = after.timestamp(), None
    for match in cronsim.CronSim(expression, after - SLACK):
        at = match.timestamp()
        if best is not None and at > best.timestamp() + SLACK.total_seconds():
            return best
        if at > limit and (best is None or at < best.timestamp()):
            best = match
    raise ValueError(f"{expression!r} never matches")  # pragma: no cover - cron repeats


def window_end(schedule: WarmSchedule, opened: datetime) -> float:
    """When the window that opened at ``opened`` closes, in seconds since the epoch: at the
    next match of ``end``, or ``durationSeconds`` of real time later (a daylight saving change
    in between neither stretches nor shortens it)."""
    if schedule.end is not None:
        return _next_match(schedule.end, opened).timestamp()
    return opened.timestamp() + (schedule.duration_seconds or 0)


def open_until(schedule: WarmSchedule, now: float) -> float | None:
    """When the window of ``schedule`` open at ``now`` closes, or None when it is closed."""
    wall = _wall(now, schedule.time_zone)
    opened = _last_match(schedule.start, wall)
    closes = window_end(schedule, opened)
    return closes if closes > now else None


def next_edge(schedule: WarmSchedule, now: float) -> float:
    """When ``schedule`` next opens or closes after ``now``."""
    opens = _next_match(schedule.start, _wall(now, schedule.time_zone)).timestamp()
    closes = open_until(schedule, now)
    return opens if closes is None else min(opens, closes)


def warmth(spec: AgentPoolSpec, now: float) -> Warmth:
    """The minSize and minIdle in force at ``now``: the largest of the spec's and of every
    window open then; with the open windows' names and the next edge of any window."""
    return warmth_of(spec.schedules, min_size=spec.min_size, min_idle=spec.min_idle, now=now)


def warmth_of(
    schedules: Sequence[WarmSchedule], *, min_size: int, min_idle: int, now: float
) -> Warmth:
    """:func:`warmth` for ``schedules`` over a base ``min_size`` and ``min_idle``."""
    opened = [schedule for schedule in schedules if open_until(schedule, now) is not None]
    edges = [next_edge(schedule, now) for schedule in schedules]
    return Warmth(
        min_size=max([min_size, *(s.min_size for s in opened if s.min_size is not None)]),
        min_idle=max([min_idle, *(s.min_idle for s in opened if s.min_idle is not None)]),
        open=tuple(schedule.name for schedule in opened),
        next_edge=min(edges) if edges else None,
    )
