"""What wakes the run engine's loop: news from its lanes, its intake or its callers, or a
deadline (the next status write, retry or poll of the source).

The loop turns about once per item, and its deadline (the next status write) seldom changes
between turns: one timer stays armed for it instead of a new one each turn.
"""

from __future__ import annotations

import asyncio

from agentpool.runs.contracts import Clock


class Alarm:
    """The engine loop's wake-up."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._event = asyncio.Event()
        self._timer: asyncio.Task[None] | None = None
        self._timer_at: float | None = None

    def wake(self) -> None:
        """Something happened that the loop must look at."""
        self._event.set()

    def clear(self) -> None:
        """The loop looks now: what happens from here wakes it again."""
        self._event.clear()

    async def wait(self, deadline: float | None) -> None:
        """Until :meth:`wake`, or ``deadline``."""
        timer = self._timer
        if deadline != self._timer_at or timer is None or timer.done():
            self.disarm()
            if deadline is not None:
                self._timer_at = deadline
                self._timer = asyncio.ensure_future(self._wake_at(deadline))
        await self._event.wait()

    async def _wake_at(self, deadline: float) -> None:
        await self._clock.sleep(deadline - self._clock.now())
        self._event.set()

    def disarm(self) -> None:
        """Stop the timer: the loop is over."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = None, None
