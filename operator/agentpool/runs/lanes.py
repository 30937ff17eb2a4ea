"""The ``cap`` lanes of a run: each a task that carries items, one attempt at a time.

The engine's loop fills free lanes from the run's feed (:meth:`Lanes.fill`); a lane makes its
item's attempt through :class:`~agentpool.runs.calls.AgentCalls`, records the verdict (an
output, or the item goes to :class:`~agentpool.runs.retries.Retries`), and goes straight on
with the next item when one may start at once. An item whose pool does not exist, or serves
another protocol than the run speaks, is parked; one that finds no agent goes back to the front,
and when no other lane holds an agent either, the run is deadlocked (:attr:`Lanes.deadlock`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import KW_ONLY, InitVar, dataclass, field

from opentelemetry import trace

from agentpool import tracing
from agentpool.api.reasons import Reason
from agentpool.pool.checkin import CheckoutFailed, PoolNotFound
from agentpool.runs.backlog import Work
from agentpool.runs.calls import AgentCalls, Verdict, note_failure, note_verdict
from agentpool.runs.contracts import Clock, ProtocolMismatch, Waiting
from agentpool.runs.feed import Feed
from agentpool.runs.intake import Intake
from agentpool.runs.journaling import Recorder
from agentpool.runs.retries import Retries
from agentpool.runs.shared import RunShared


@dataclass(slots=True, eq=False, repr=False)
class Lanes:
    """The run's items in flight, at most ``cap`` of them."""

    cap: int
    shared: InitVar[RunShared]
    _: KW_ONLY
    feed: Feed
    calls: AgentCalls
    retries: Retries
    intake: Intake
    may_start: Callable[[], bool]
    """Whether items may start: the run is not suspended, deadlocked or out of source."""
    records: Recorder = field(init=False)
    waiting: Waiting = field(init=False)
    clock: Clock = field(init=False)
    changed: Callable[[], None] = field(init=False)
    """Called when status has news."""
    wake: Callable[[], None] = field(init=False)
    """Called when the engine's loop must look: a lane is free, or a task is done."""
    deadlock: str | None = field(default=None, init=False)
    """Why a checkout found no agent while no lane held one."""
    _tasks: set[asyncio.Task[None]] = field(default_factory=set, init=False)
    _holding: int = field(default=0, init=False)

    def __post_init__(self, shared: RunShared) -> None:
        self.records, self.waiting, self.clock = shared.records, shared.waiting, shared.clock
        self.changed, self.wake = shared.changed, shared.wake

    def __len__(self) -> int:
        """Lanes in use."""
        return len(self._tasks)

    async def fill(self, now: float) -> None:
        """Start items in the free lanes, as many as may start now."""
        self.feed.reopen()
        while len(self._tasks) < self.cap:
            work = await self.feed.take(now)
            if work is None:
                return
            task = asyncio.ensure_future(self._drive(work))
            self._tasks.add(task)
            # Wake the loop once the task is done, not from inside it: a wake set in its last
            # lines can be taken before the task counts as done, and then nothing wakes the loop
            # again for it.
            task.add_done_callback(self._task_done)

    def reap(self) -> None:
        """Free the lanes whose task is done; raises what a task raised."""
        for task in [task for task in self._tasks if task.done()]:
            self._tasks.discard(task)
            task.result()

    async def stop(self) -> None:
        """Stop every item in flight (each checks its agent back in)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _task_done(self, _: asyncio.Task[None]) -> None:
        self.wake()

    async def _drive(self, work: Work) -> None:
        """Carry items through one lane, from ``work`` on.

        Once an item is done the lane goes straight on with the next, when one may start at
        once: a loop turn and a task fewer per item. Anything else (a suspend, a limit, nothing
        ready, another lane asking the source) ends the task, and the loop decides.
        """
        while await self._carry(work):
            if not self.may_start():
                return
            now = self.clock.now()
            self.feed.promote(now)
            taken = await self.feed.take(now)
            if taken is None:
                return
            work = taken
            if len(self._tasks) < self.cap:
                # Lanes are free (the source had nothing for a while): the loop fills them.
                self.wake()

    async def _carry(self, work: Work) -> bool:
        """One attempt at ``work``, in its span; False when it could not start (no pool, no
        agent)."""
        with self.calls.traced(work) as span:
            try:
                checkout = await self.calls.checkout(work)
            except PoolNotFound as error:
                self._park(work, span, Reason.POOL_NOT_FOUND, f"{error}: its items cannot start")
                self.feed.park(work, str(error))
                return False
            except ProtocolMismatch as error:
                # No agent of the pool can take the run's items: they wait, as for a pool that
                # is not there, and the run says why and what to change.
                self._park(work, span, Reason.PROTOCOL_MISMATCH, str(error))
                self.feed.park(work, str(error))
                return False
            except CheckoutFailed as error:
                note_failure(span, Reason.CHECKOUT_TIMEOUT, str(error))
                if self._holding == 0:
                    self.deadlock = str(error)
                self._unstart(work)
                self.feed.put_back(work)
                return False
            span.set_attribute(tracing.AGENT, checkout.agent)
            self._holding += 1
            try:
                verdict = await self.calls.call(work, checkout)
                note_verdict(span, verdict)
                self._settle(work, checkout.agent, verdict)
            finally:
                self._holding -= 1
                self.changed()
                self.intake.poke()
            return True

    def _park(self, work: Work, span: trace.Span, reason: str, cause: str) -> None:
        """``work``'s pool cannot take it: the run's Waiting condition says why, untimed."""
        note_failure(span, reason, cause)
        self.waiting.begin(f"pool/{work.pool}", reason, cause, timed=False)
        self._unstart(work)

    def _unstart(self, work: Work) -> None:
        self.records.unstart(work.key)
        self.changed()

    def _settle(self, work: Work, agent: str, verdict: Verdict) -> None:
        """Record what an attempt came to, or send the item round again."""
        if verdict.ok:
            self.records.output(work.key, verdict.output, encoded=verdict.encoded)
        elif verdict.refused:
            self._unstart(work)
            self.retries.refused(work, agent)
        else:
            self.retries.failed(work, agent, verdict.reason, verdict.message)
