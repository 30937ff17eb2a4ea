"""What wakes the engine's loop: a wake-up at once, else its deadline."""

from __future__ import annotations

import asyncio

import pytest

from agentpool.runs.alarm import Alarm
from clocks import LoopClock

#: Calls, back-offs and status intervals pass on looptime's fake loop time.
pytestmark = pytest.mark.looptime


async def test_the_loop_wakes_when_woken_or_at_its_deadline() -> None:
    """A wake-up wakes the loop at once, even before its deadline; without one the loop wakes at
    the deadline."""
    clock = LoopClock()
    alarm = Alarm(clock)
    alarm.wake()
    await alarm.wait(None)
    alarm.clear()
    start = clock.now()
    await alarm.wait(start + 5)
    assert clock.now() == start + 5
    alarm.clear()
    early = asyncio.ensure_future(alarm.wait(start + 60))
    await asyncio.sleep(0)
    alarm.wake()
    await early
    assert clock.now() == start + 5
    alarm.disarm()
