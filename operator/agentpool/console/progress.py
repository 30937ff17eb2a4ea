"""A one-line progress bar for a PoolRun, computed from its status.

Pure formatting: ``agentpool watch`` and the demo read the run's status, hand each look to a
:class:`ProgressWatch` with the time, and print the line it gives.

While a run goes on, its rate and ETA are what the watch measured between its own looks: a
status carries counts but not when they changed, and an average since ``startTime`` would take
in the run's wait for its first agents (the quickstart's first ETA came out a hundred times too
long that way). Once a run has finished, its rate is the average over its whole duration.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import datetime

from agentpool.api import RawRunStatus

BAR_WIDTH = 30
RATE_POINTS = 10
"""Changes of the finished count the rate is measured over: with status written about once a
second, the last ten seconds or so of a fast run, and the last ten changes of a slow one."""


@dataclass(frozen=True)
class Progress:
    done: int
    failed: int
    active: int
    total: int | None
    rate: float | None
    eta_seconds: float | None
    phase: str
    result: str | None


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


class RateMeter:
    """Items finished a second, measured from the looks at status in which the count moved.

    The first look is no measure (its count may have been written long before); from then on
    each look that finds the count changed is a point, taken at the time of the look, and the
    rate runs from the oldest point kept to the newest. Both ends come late by up to one
    polling interval, so the error does not grow with the wait before the run got going.
    """

    def __init__(self, points: int = RATE_POINTS) -> None:
        self._points: deque[tuple[float, int]] = deque(maxlen=points)
        self._last: int | None = None

    def observe(self, at: float, finished: int) -> float | None:
        """Note a look at ``at`` (seconds) finding ``finished`` items; the rate so far, if any."""
        if self._last is not None and finished < self._last:
            # Fewer than before: another run of the same name. Start over.
            self._points.clear()
            self._last = None
        if self._last is not None and finished != self._last:
            self._points.append((at, finished))
        self._last = finished
        if len(self._points) < 2:
            return None
        (first_at, first), (last_at, last) = self._points[0], self._points[-1]
        return (last - first) / (last_at - first_at) if last_at > first_at else None


def progress_of(
    status: RawRunStatus,
    now: datetime,
    *,
    rate: float | None = None,
    total_known: bool = True,
) -> Progress:
    """Counts, rate and ETA from a run's status.

    ``rate``: items a second as measured while the run goes on (see :class:`RateMeter`); with
    none, a running run shows no rate and no ETA. A finished run's rate is its average from
    ``startTime`` to ``completionTime``. ``total_known``: False for a run fed by a source
    service, whose ``total`` counts the items seen so far until it ends.
    """
    done = int(status.get("succeeded") or 0)
    failed = int(status.get("failed") or 0)
    active = int(status.get("active") or 0)
    started = parse_time(status.get("startTime"))
    finished = parse_time(status.get("completionTime"))
    total = status.get("total") if total_known or finished is not None else None
    eta = None
    if finished is not None:
        rate = None
        elapsed = (finished - started).total_seconds() if started else 0.0
        if elapsed > 0 and done + failed > 0:
            rate = (done + failed) / elapsed
    elif rate is not None and rate > 0 and total is not None:
        eta = max(0.0, (int(total) - done - failed) / rate)
    return Progress(
        done=done,
        failed=failed,
        active=active,
        total=int(total) if total is not None else None,
        rate=rate,
        eta_seconds=eta,
        phase=str(status.get("phase") or "Pending"),
        result=status.get("result"),
    )


def render(progress: Progress) -> str:
    """``[#########.....] 31/40 done, 2 failed, 4 active, 5.2/s, ETA 2s``."""
    finished = progress.done + progress.failed
    if progress.total:
        filled = min(BAR_WIDTH, BAR_WIDTH * finished // progress.total)
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        count = f"{finished}/{progress.total}"
    else:
        bar = "?" * BAR_WIDTH
        count = f"{finished}/?"
    parts = [
        f"[{bar}] {count}",
        f"{progress.done} done",
        f"{progress.failed} failed",
        f"{progress.active} active",
    ]
    if progress.rate is not None:
        parts.append(f"{progress.rate:.1f}/s")
    if progress.eta_seconds is not None and progress.result is None:
        parts.append(f"ETA {progress.eta_seconds:.0f}s")
    parts.append(progress.result or progress.phase)
    return ", ".join(parts)


class ProgressWatch:
    """The line to print for each look at one run's status, measuring its rate as it goes.

    ``total_known``: False for a run fed by a source service (``spec.source.http``), whose
    total is not known until it ends.
    """

    def __init__(self, *, total_known: bool = True) -> None:
        self._meter = RateMeter()
        self._total_known = total_known

    def line(self, status: RawRunStatus, now: datetime) -> str:
        finished = int(status.get("succeeded") or 0) + int(status.get("failed") or 0)
        rate = self._meter.observe(now.timestamp(), finished)
        return render(progress_of(status, now, rate=rate, total_known=self._total_known))
