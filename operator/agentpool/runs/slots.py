"""The ``cap`` slots of a run: each a task that carries items, one attempt at a time.

The engine's loop fills free slots from the run's feed (:meth:`Slots.fill`); a slot makes its
item's attempt through the :class:`~agentpool.runs.calls.Caller`, records the verdict (an output,
or the item goes to :class:`~agentpool.runs.retries.Retries`), and goes straight on with the next
item when one may start at once. An item whose pool does not exist is parked; one that finds no
agent goes back to the front, and when no other slot holds an agent either, the run is
deadlocked (:attr:`Slots.deadlock`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from agentpool.api.reasons import Reason
from agentpool.pool.checkin import CheckoutFailed, PoolNotFound
from agentpool.runs.backlog import Work
from agentpool.runs.calls import Caller, Verdict
from agentpool.runs.contracts import Clock, Waiting
from agentpool.runs.feed import Feed
from agentpool.runs.intake import Intake
from agentpool.runs.journaling import Recorder
from agentpool.runs.retries import Retries


class Slots:
    """The run's items in flight, at most ``cap`` of them."""

    def __init__(
        self,
        cap: int,
        *,
        feed: Feed,
        calls: Caller,
        records: Recorder,
        retries: Retries,
        intake: Intake,
        waiting: Waiting,
        clock: Clock,
        may_start: Callable[[], bool],
        changed: Callable[[], None],
        wake: Callable[[], None],
    ) -> None:
        self._cap = cap
        self._feed = feed
        self._calls = calls
        self._records = records
        self._retries = retries
        self._intake = intake
        self._waiting = waiting
        self._clock = clock
        # Whether items may start: the run is not suspended, deadlocked or out of source.
        self._may_start = may_start
        # Status has news.
        self._changed = changed
        # The engine's loop must look: a slot is free, or a task is done.
        self._wake = wake
        self._tasks: set[asyncio.Task[None]] = set()
        self._holding = 0
        self.deadlock: str | None = None
        """Why a checkout found no agent while no slot held one."""

    def __len__(self) -> int:
        """Slots in use."""
        return len(self._tasks)

    async def fill(self, now: float) -> None:
        """Start items in the free slots, as many as may start now."""
        self._feed.reopen()
        while len(self._tasks) < self._cap:
            work = await self._feed.take(now)
            if work is None:
                return
            task = asyncio.ensure_future(self._drive(work))
            self._tasks.add(task)
            # Wake the loop once the task is done, not from inside it: a wake set in its last
            # lines can be taken before the task counts as done, and then nothing wakes the loop
            # again for it.
            task.add_done_callback(self._task_done)

    def reap(self) -> None:
        """Free the slots whose task is done; raises what a task raised."""
        for task in [task for task in self._tasks if task.done()]:
            self._tasks.discard(task)
            task.result()

    async def stop(self) -> None:
        """Stop every item in flight (each checks its agent back in)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _task_done(self, _: asyncio.Task[None]) -> None:
        self._wake()

    async def _drive(self, work: Work) -> None:
        """Carry items through one slot, from ``work`` on.

        Once an item is done the slot goes straight on with the next, when one may start at
        once: a loop turn and a task fewer per item. Anything else (a suspend, a limit, nothing
        ready, another slot asking the source) ends the task, and the loop decides.
        """
        while await self._carry(work):
            if not self._may_start():
                return
            now = self._clock.now()
            self._feed.promote(now)
            taken = await self._feed.take(now)
            if taken is None:
                return
            work = taken
            if len(self._tasks) < self._cap:
                # Slots are free (the source had nothing for a while): the loop fills them.
                self._wake()

    async def _carry(self, work: Work) -> bool:
        """One attempt at ``work``; False when it could not start (no pool, no agent)."""
        try:
            checkout = await self._calls.checkout(work)
        except PoolNotFound as error:
            cause = f"{error}: its items cannot start"
            self._waiting.begin(f"pool/{work.pool}", Reason.POOL_NOT_FOUND, cause, timed=False)
            self._unstart(work)
            self._feed.park(work, str(error))
            return False
        except CheckoutFailed as error:
            if self._holding == 0:
                self.deadlock = str(error)
            self._unstart(work)
            self._feed.put_back(work)
            return False
        self._holding += 1
        try:
            self._settle(work, checkout.agent, await self._calls.call(work, checkout))
        finally:
            self._holding -= 1
            self._changed()
            self._intake.poke()
        return True

    def _unstart(self, work: Work) -> None:
        self._records.unstart(work.key)
        self._changed()

    def _settle(self, work: Work, agent: str, verdict: Verdict) -> None:
        """Record what an attempt came to, or send the item round again."""
        if verdict.ok:
            self._records.output(work.key, verdict.output, encoded=verdict.encoded)
        elif verdict.refused:
            self._unstart(work)
            self._retries.refused(work, agent)
        else:
            self._retries.failed(work, agent, verdict.reason, verdict.message)
