"""The items of a run on their way: each a :class:`Work`, and the :class:`Backlog` of those that
have come from the source and not started yet.

The engine names and routes each item as the intake hands it over and adds it to the backlog;
its lanes take items from the front, and put back at the front an item whose checkout found no
agent, and retries once their back-off is over. An item whose pool does not exist is parked
instead, with the reason, and never starts: once the rest has drained, the run is deadlocked.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Work:
    """An item on its way: where it goes and which attempt comes next."""

    key: str
    index: int
    value: Any
    pool: str
    attempt: int = 1
    last_agent: str | None = None
    refused: int = 0
    """Agents that refused the operator's token on this item: none of them costs an attempt."""

    def retried(self, agent: str) -> Work:
        """The next attempt, after ``agent`` failed this one."""
        return dataclasses.replace(self, attempt=self.attempt + 1, last_agent=agent)

    def refused_by(self, agent: str) -> Work:
        """The same attempt again, after ``agent`` refused the operator's token."""
        return dataclasses.replace(self, refused=self.refused + 1, last_agent=agent)


class Backlog:
    """The run's items that wait to start, in order, and those parked for a missing pool."""

    def __init__(self) -> None:
        self._pending: deque[Work] = deque()
        self._parked: list[Work] = []
        self._missing: dict[str, str] = {}

    def __len__(self) -> int:
        """Items waiting to start (not those parked)."""
        return len(self._pending)

    def keys(self) -> Iterator[str]:
        """The keys of the items waiting to start, in order."""
        return (work.key for work in self._pending)

    def add(self, work: Work) -> None:
        """``work`` came from the source: it starts after those before it."""
        self._pending.append(work)

    def put_back(self, work: Work) -> None:
        """``work`` could not start after all: it starts first when an agent is free."""
        self._pending.appendleft(work)

    def put_back_all(self, works: Sequence[Work]) -> None:
        """``works`` (retries due) start first, in their order."""
        self._pending.extendleft(reversed(works))

    def first(self) -> Work | None:
        """The next item that may start, parking those before it whose pool is missing."""
        while self._pending:
            work = self._pending[0]
            if work.pool not in self._missing:
                return work
            self._parked.append(self._pending.popleft())
        return None

    def take_first(self) -> Work:
        """Take the item :meth:`first` gave: it starts."""
        return self._pending.popleft()

    def park(self, work: Work, cause: str) -> None:
        """``work``'s pool does not exist (``cause`` says so): it and its pool's items wait."""
        self._missing[work.pool] = cause
        self._parked.append(work)

    def upcoming(self, room: int) -> list[tuple[str, int]]:
        """The first ``room`` items that would start, with their attempts."""
        ready = [work for work in self._pending if work.pool not in self._missing]
        return [(work.key, work.attempt) for work in ready[: max(0, room)]]

    def missing(self) -> Collection[str]:
        """Why the parked items cannot start: one cause per missing pool; none when none is."""
        return self._missing.values() if self._parked else ()
