"""What a run waits for while items cannot start, as its ``Waiting`` condition says it.

A run waits for a pool that does not exist (yet), or for a source that has not answered or has
no item ready. The dispatcher and the run's intake note each wait as it begins and ends, through
:class:`WaitNotes`; :class:`Waits` holds them and is pure: it takes the time as a value. The
reporter renders the condition and ``status.message`` from it at each status write, saying how
long the run has waited; the engine writes again as the wait grows (after 1, 2, 4 ... 32 s, then
every minute), so that figure stays near the truth without a write a second.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agentpool.runs.contracts import Clock

REFRESH_STEPS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
REFRESH_EVERY = 60.0


@dataclass(frozen=True)
class Wait:
    """One thing the run waits for, since ``since``; shown from ``since + after`` on."""

    reason: str
    message: str
    since: float
    after: float = 0.0
    timed: bool = True
    """Whether the message says how long the run has waited."""


def format_duration(seconds: float) -> str:
    """``45s``, ``3m5s``, ``2h0m``: whole seconds, as kubectl prints ages."""
    total = int(seconds)
    if total < 60:
        return f"{total}s"
    if total < 3600:
        return f"{total // 60}m{total % 60}s"
    return f"{total // 3600}h{total % 3600 // 60}m"


def next_step(waited: float) -> float:
    """The next wait, in seconds, at which a message saying how long is written again."""
    for step in REFRESH_STEPS:
        if waited < step:
            return step
    return (waited // REFRESH_EVERY + 1) * REFRESH_EVERY


class Waits:
    """The run's waits, by subject (``pool/<name>``, ``source``)."""

    def __init__(self) -> None:
        self._waits: dict[str, Wait] = {}

    def begin(
        self,
        subject: str,
        reason: str,
        message: str,
        *,
        now: float,
        after: float = 0.0,
        timed: bool = True,
    ) -> bool:
        """Note a wait; one already noted for ``subject`` keeps its start and takes the new
        words. True when that changed anything."""
        known = self._waits.get(subject)
        if known is not None:
            now, after = known.since, min(after, known.after)
        wait = Wait(reason, message, now, after, timed)
        self._waits[subject] = wait
        return wait != known

    def end(self, subject: str) -> bool:
        """The wait for ``subject`` is over; True when there was one."""
        return self._waits.pop(subject, None) is not None

    def shown(self, now: float) -> list[Wait]:
        """The waits the run reports at ``now``, the longest first."""
        return sorted(
            (wait for wait in self._waits.values() if now >= wait.since + wait.after),
            key=lambda wait: wait.since,
        )

    def condition(self, now: float) -> tuple[str, str, float] | None:
        """The Waiting condition's reason, message and start at ``now``, or None when nothing
        waits."""
        shown = self.shown(now)
        if not shown:
            return None
        texts = [
            f"{wait.message} (waited {format_duration(now - wait.since)} so far)"
            if wait.timed
            else wait.message
            for wait in shown
        ]
        return shown[0].reason, "; ".join(texts), shown[0].since

    def next_change(self, now: float) -> float | None:
        """When the condition next reads differently without any news: a wait comes into view,
        or the time waited reaches its next step."""
        times = []
        for wait in self._waits.values():
            shown_at = wait.since + wait.after
            if now < shown_at:
                times.append(shown_at)
            elif wait.timed:
                times.append(wait.since + next_step(now - wait.since))
        return min(times) if times else None


class WaitNotes:
    """How the dispatcher and the intake note waits: stamped with the clock, and each change
    tells the engine that status has news."""

    def __init__(self, waits: Waits, clock: Clock, changed: Callable[[], None]) -> None:
        self._waits = waits
        self._clock = clock
        self._changed = changed

    def begin(
        self, subject: str, reason: str, message: str, *, after: float = 0.0, timed: bool = True
    ) -> None:
        now = self._clock.now()
        if self._waits.begin(subject, reason, message, now=now, after=after, timed=timed):
            self._changed()

    def end(self, subject: str) -> None:
        if self._waits.end(subject):
            self._changed()
