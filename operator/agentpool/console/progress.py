"""A one-line progress bar for a PoolRun, computed from its status.

Pure formatting: ``agentpool watch`` and the demo read the run's status, hand each look to a
:class:`ProgressWatch` with the time, and print the line it gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

BAR_WIDTH = 30


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


def progress_of(status: dict[str, Any], now: datetime) -> Progress:
    """Counts, rate (items a second since the run started) and ETA from a run's status."""
    done = int(status.get("succeeded") or 0)
    failed = int(status.get("failed") or 0)
    active = int(status.get("active") or 0)
    total = status.get("total")
    started = parse_time(status.get("startTime"))
    finished = parse_time(status.get("completionTime"))
    rate = None
    eta = None
    elapsed = ((finished or now) - started).total_seconds() if started else 0.0
    if elapsed > 0 and done + failed > 0:
        rate = (done + failed) / elapsed
        if total is not None:
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
    """The line to print for each look at one run's status."""

    def line(self, status: dict[str, Any], now: datetime) -> str:
        return render(progress_of(status, now))
