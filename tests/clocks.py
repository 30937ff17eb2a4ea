"""The clock the operator's parts go by in tests: the event loop's own.

A test marked ``looptime`` (the looptime plugin) runs on fake loop time, which jumps to the next
timer as soon as nothing else is left to run: call durations, back-offs, status intervals and
lease terms then cost no real time, and sleeps and the time they are measured by pass together.
Unmarked, the same clock runs on real time.
"""

from __future__ import annotations

import asyncio

#: Where the tests' wall time starts, in seconds since the epoch: loop time 0 is this instant.
EPOCH = 1_700_000_000.0


class LoopClock:
    """Wall time that runs with the event loop's clock, from :data:`EPOCH`, and sleeps on the
    loop: the :class:`agentpool.runs.Clock` of the tests."""

    def now(self) -> float:
        return EPOCH + asyncio.get_running_loop().time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))
