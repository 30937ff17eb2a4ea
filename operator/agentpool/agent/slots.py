"""An agent's slots: the items it serves at once, and the claim that keeps them all free.

An agent serves ``slots`` items at once (the pool's ``slots``, given as ``AGENTPOOL_SLOTS``):
``agentpool.agent.server`` takes a slot for each ``POST /invoke`` and refuses one (409) only
when every slot is busy. A reset and the lease hooks act on the whole agent, so they run under
:meth:`Slots.exclusive`, which waits for every slot to be free and takes them all meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from typing import Any


class Slots:
    """Which items the agent serves now, one slot each, and whether it is claimed whole."""

    def __init__(self, count: int) -> None:
        if count < 1:
            raise ValueError(f"an agent has at least one slot, not {count}")
        self.count = count
        self._items: dict[int, Any] = {}
        self._tickets = itertools.count(1)
        self._exclusive = False
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def busy(self) -> bool:
        """At least one slot is busy (or the agent is claimed whole)."""
        return self._exclusive or bool(self._items)

    @property
    def busy_slots(self) -> int:
        """Slots busy now: all of them while the agent is claimed whole."""
        return self.count if self._exclusive else len(self._items)

    @property
    def full(self) -> bool:
        """No slot is free for another item."""
        return self._exclusive or len(self._items) >= self.count

    @property
    def items(self) -> list[Any]:
        """The ids of the items served now, oldest first."""
        return list(self._items.values())

    @property
    def current(self) -> Any:
        """The oldest item served now, or None: the one ``current`` of a single slot."""
        return next(iter(self._items.values()), None)

    def take(self, item: Any) -> int:
        """Take a free slot for ``item``; the ticket to give back. The caller checks ``full``
        first, with no await between, so two calls cannot both take the last slot."""
        assert not self.full, "a slot is taken only while one is free"
        ticket = next(self._tickets)
        self._items[ticket] = item
        self._idle.clear()
        return ticket

    def give_back(self, ticket: int) -> None:
        """The item of ``ticket`` is done: its slot is free."""
        self._items.pop(ticket, None)
        if not self.busy:
            self._idle.set()

    async def wait_idle(self) -> None:
        """Until no slot is busy."""
        while self.busy:
            await self._idle.wait()

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """Hold every slot: wait until none is busy, keep them all until the block ends."""
        await self.wait_idle()
        self._exclusive = True
        self._idle.clear()
        try:
            yield
        finally:
            self._exclusive = False
            if not self._items:
                self._idle.set()
