"""Waiting on a broker in tests: woken by its change notification, never by a sleep."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from agentpool.broker import Broker


async def wait_until(broker: Broker, condition: Callable[[], bool]) -> None:
    """Wait for the broker to reach a condition, woken by its change notification."""
    async with asyncio.timeout(5):
        while not condition():
            broker.changed.clear()
            if condition():
                return
            await broker.changed.wait()


def queued(broker: Broker, count: int) -> Callable[[], bool]:
    """A condition: exactly `count` checkouts wait."""
    return lambda: len(broker.waiters()) == count
