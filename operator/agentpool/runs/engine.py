"""The PoolRun engine: drives a run's items through its pools, and reports as it goes.

It keeps up to ``cap`` items in flight, each one a checkout, an invoke and a checkin; retries
failed attempts with back-off (to another agent when one is free); records every outcome in a
:class:`RunLedger` (and in the run's journal, when it has one, so that an operator crash re-runs
only what was in flight); writes status in batches; and ends Drained or Deadlocked. The kopf
daemon of a PoolRun builds one per run with the injected dispatcher, invoker, sink, journal and
clock, and awaits :meth:`RunEngine.run`; it calls :meth:`RunEngine.set_suspended` when
``spec.suspend`` changes.
Decisions (naming, routing, placement, outcome) are the pure functions of the sibling modules.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentpool.api.reasons import Reason
from agentpool.runs.config import RunConfig
from agentpool.runs.contracts import (
    Checkout,
    CheckoutFailed,
    Clock,
    Dispatcher,
    Invoker,
    Journal,
    PoolNotFound,
    StatusSink,
    SystemClock,
)
from agentpool.runs.intake import Intake
from agentpool.runs.items import ItemKeys, Rejection, route_item
from agentpool.runs.journaling import Recorder, decode_entry, replay
from agentpool.runs.outcome import Outcome, outcome_now
from agentpool.runs.reporting import Reporter
from agentpool.runs.results import CHUNK_BYTES, encode
from agentpool.runs.sources import ItemSource, ListSource, SourceError
from agentpool.runs.waits import WaitNotes, Waits

#: The longest an item waits for another agent after one refused the operator's token.
REFUSED_MAX = 5.0


@dataclass
class Work:
    """An item on its way: where it goes and which attempt comes next."""

    key: str
    index: int
    value: Any
    pool: str
    attempt: int = 1
    last_agent: str | None = None
    # Agents that refused the operator's token on this item: none of them costs an attempt.
    refused: int = 0


class RunEngine:
    """One PoolRun, from its first item to Drained or Deadlocked."""

    def __init__(
        self,
        config: RunConfig,
        *,
        source: ItemSource,
        dispatcher: Dispatcher,
        invoker: Invoker,
        sink: StatusSink,
        clock: Clock | None = None,
        status: Mapping[str, Any] | None = None,
        configmaps: Mapping[str, Mapping[str, str]] | None = None,
        suspended: bool = False,
        failure_event_interval: float = 5.0,
        journal: Journal | None = None,
    ) -> None:
        self.config = config
        self._source = source
        self._dispatcher = dispatcher
        self._invoker = invoker
        self._clock = clock or SystemClock()
        self._waits = Waits()
        self._notes = WaitNotes(self._waits, self._clock, self._mark_dirty)
        self._suspended = suspended
        status = status or {}
        entries = [decode_entry(raw) for raw in journal.load()] if journal is not None else []
        self.ledger = replay(
            entries,
            run=config.name,
            replayable=source.replayable,
            status=status,
            configmaps=configmaps,
        )
        self._journal = journal
        self._records = Recorder(self.ledger, journal)
        self._report = Reporter(
            sink=sink,
            clock=self._clock,
            ledger=self.ledger,
            status=status,
            interval=config.status_interval_seconds,
            failure_event_interval=failure_event_interval,
            held_gap=config.held_write_gap_seconds,
            journal=journal,
            waits=self._waits,
        )
        # The re-run limit stopped the last fill: only a status write lets more items start.
        self._held = False
        self._pending: deque[Work] = deque()
        self._retries: list[tuple[float, Work]] = []
        self._parked: dict[str, list[Work]] = {}
        self._missing_pools: dict[str, str] = {}
        # Made-up keys avoid every real id: all of a list's, and those an HTTP source gave.
        self._keys = ItemKeys.of(
            source.items if isinstance(source, ListSource) else None, id_field=config.item_id
        )
        self._tasks: set[asyncio.Task[None]] = set()
        # A replayable source gives its items from the first again; another goes on where it was.
        self._next_index = 0 if source.replayable else self.ledger.seen
        self._holding = 0
        self._source_error: str | None = None
        self._source_reason: str = Reason.SOURCE_FAILED
        self._deadlock: str | None = None
        self._wake = asyncio.Event()
        self._intake = Intake(
            source,
            clock=self._clock,
            waiting=self._notes,
            patience=config.status_interval_seconds,
            ready=self._wake.set,
        )
        self._timer: asyncio.Task[None] | None = None
        self._timer_at: float | None = None
        if not source.replayable:
            self._keys.made_up |= self.ledger.made_up.keys()
            self._keys.real |= self.ledger.recorded - self.ledger.made_up.keys()

    def set_suspended(self, suspended: bool) -> None:
        """Follow ``spec.suspend``: finish what is in flight and dispatch nothing more, or go on."""
        if suspended != self._suspended:
            self._suspended = suspended
            self._wake.set()

    def stop_source(self, reason: str, message: str) -> None:
        """The source can no longer be trusted (it changed under the run): start nothing more,
        let what is in flight finish, and fail the run with ``reason``."""
        if self._source_error is None:
            self._source_error, self._source_reason = message, reason
            self._mark_dirty()
            self._wake.set()

    async def run(self) -> Outcome:
        """Drive the run to its end, and return how it ended (also written to status)."""
        try:
            return await self._run()
        except asyncio.CancelledError:
            # The operator is stopping: keep what is done, so the next one resumes from there.
            await self._stop_items()
            with contextlib.suppress(Exception):
                await self._report.write(total=self._total())
            raise
        finally:
            self._disarm()
            await self._stop_items()
            await self._report.close()
            await self._intake.close()

    async def _stop_items(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _run(self) -> Outcome:
        await self._report.begin(f"dispatching to {self._pools_text()}, cap {self.config.cap}")
        while True:
            self._wake.clear()
            self._reap()
            now = self._clock.now()
            self._promote_retries(now)
            if self._may_dispatch():
                await self._fill(now)
            await self._report.follow_suspension(
                self._suspended, idle=not self._tasks, total=self._total()
            )
            if not self._tasks:
                outcome = self._outcome()
                if outcome is not None:
                    await self._report.finish(outcome, total=self._total())
                    self._records.discard()
                    return outcome
            if self._report.due(held=self._held_on_write()):
                await self._report.write(total=self._total(), declare=await self._upcoming(now))
                # The write may have opened the gate on items waiting to start.
                continue
            await self._wait(self._next_deadline())

    def _may_dispatch(self) -> bool:
        return not (self._suspended or self._deadlock or self._source_error)

    def _held_on_write(self) -> bool:
        # With nothing running, every unwritten item is done: a write frees the whole limit.
        return self._held and not self._tasks

    async def _fill(self, now: float) -> None:
        self._held = False
        while len(self._tasks) < self.config.cap:
            work = await self._take(now)
            if work is None:
                return
            task = asyncio.ensure_future(self._drive(work))
            self._tasks.add(task)
            # Wake the loop once the task is done, not from inside it: a wake set in its last
            # lines can be taken before the task counts as done, and then nothing wakes the loop
            # again for it.
            task.add_done_callback(self._task_done)

    async def _take(self, now: float) -> Work | None:
        """The next item to start, marked started; None when none may start now."""
        try:
            return await self._take_next(now)
        finally:
            # What finished, and the start of what starts, reach the kernel before its call:
            # a crash re-runs at most cap items, each with its attempt raised.
            self._records.flush()

    def _rerun_limit(self) -> int | None:
        return self.config.effective_rerun_limit(
            replayable=self._source.replayable, journaled=self._journal is not None
        )

    async def _upcoming(self, now: float) -> list[tuple[str, int]]:
        """The items to write in flight before they start, with their attempts, when no journal
        notes starts: a crash after the write runs each again with its attempt raised. At most
        the re-run limit, with those running, so a crash re-runs no more than that."""
        limit = self._rerun_limit()
        if limit is None or not self._may_dispatch():
            return []
        room = limit - self.ledger.active
        while len(self._pending) < room and await self._pull(now):
            pass
        upcoming = [work for work in self._pending if work.pool not in self._missing_pools]
        return [(work.key, work.attempt) for work in upcoming[: max(0, room)]]

    async def _take_next(self, now: float) -> Work | None:
        limit = self._rerun_limit()
        while True:
            if not self._pending and not await self._pull(now):
                return None
            work = self._pending[0]
            if work.pool in self._missing_pools:
                self._parked.setdefault(work.pool, []).append(self._pending.popleft())
                continue
            if limit is not None and not self.ledger.attempts.declared(work.key, work.attempt):
                # Not written in flight yet: the next write names it, then it may start.
                self._held = True
                self._mark_dirty()
                return None
            self._pending.popleft()
            self._records.start(work.key, attempt=work.attempt, index=work.index)
            self._mark_dirty()
            return work

    def _mark_dirty(self) -> None:
        """Status has news: the loop arms its write timer the first time after a write."""
        if self._report.mark_dirty():
            self._wake.set()

    async def _pull(self, now: float) -> bool:
        """Bring one more runnable item into ``_pending``; False if none came now."""
        count = len(self._pending)
        while len(self._pending) == count:
            attempts = self.ledger.attempts
            active = [*attempts.in_flight, *attempts.retrying, *(w.key for w in self._pending)]
            try:
                pulled = await self._intake.take(active, now)
            except SourceError as error:
                self._source_error = str(error)
                self._mark_dirty()
                return False
            if pulled is None:
                return False
            index = self._next_index
            self._next_index += 1
            self.ledger.note_seen(self._next_index)
            named = self._keys.name(pulled.value, index, id_field=self.config.item_id)
            if named.displaced is not None and named.moved_to is not None:
                # A real id came that an earlier made-up key is: that record moves aside.
                self._records.move(named.displaced, named.moved_to)
                self._mark_dirty()
            if named.key in self.ledger.recorded:
                continue
            if named.rejection is not None:
                self._fail_now(named.key, named.rejection, index)
                continue
            # An item that may have reached an agent before a restart runs with its attempt
            # raised, when the source gives it again (an HTTP source may not).
            attempt = self.ledger.attempts.next_attempt(named.key)
            self._enqueue(named.key, index, named.value, attempt=attempt)
        return True

    def _enqueue(self, key: str, index: int, value: Any, *, attempt: int) -> None:
        pool = route_item(value, self.config)
        if isinstance(pool, Rejection):
            self._fail_now(key, pool, index)
            return
        self._pending.append(Work(key=key, index=index, value=value, pool=pool, attempt=attempt))

    def _fail_now(self, key: str, rejection: Rejection, index: int) -> None:
        self._records.failure(
            key,
            reason=rejection.reason,
            message=rejection.message,
            attempts=0,
            agent=None,
            index=index,
        )
        self._mark_dirty()
        self._report.item_failed(key, rejection.reason, rejection.message)

    async def _drive(self, work: Work) -> None:
        """Carry items through one of the run's ``cap`` slots, from ``work`` on.

        Once an item is done the slot goes straight on with the next, when one may start at
        once: a loop turn and a task fewer per item. Anything else (a suspend, a limit, nothing
        ready, another slot asking the source) ends the task, and the loop decides.
        """
        while await self._carry(work):
            if not self._may_dispatch():
                return
            now = self._clock.now()
            self._promote_retries(now)
            taken = await self._take(now)
            if taken is None:
                return
            work = taken
            if len(self._tasks) < self.config.cap:
                # Slots are free (the source had nothing for a while): the loop fills them.
                self._wake.set()

    async def _carry(self, work: Work) -> bool:
        """One attempt at ``work``; False when it could not start (no pool, no agent)."""
        try:
            checkout = await self._checkout(work)
        except PoolNotFound as error:
            self._missing_pools[work.pool] = str(error)
            cause = f"{error}: its items cannot start"
            self._notes.begin(f"pool/{work.pool}", Reason.POOL_NOT_FOUND, cause, timed=False)
            self._unstart(work)
            self._parked.setdefault(work.pool, []).append(work)
            return False
        except CheckoutFailed as error:
            if self._holding == 0:
                self._deadlock = str(error)
            self._unstart(work)
            self._pending.appendleft(work)
            return False
        self._holding += 1
        try:
            await self._attempt(work, checkout)
        except asyncio.CancelledError:
            # Stopped mid-call: the agent's state is unknown, and it must not stay checked out.
            with contextlib.suppress(Exception):
                await self._dispatcher.checkin(checkout, "lost")
            raise
        finally:
            self._holding -= 1
            self._mark_dirty()
            self._intake.poke()
        return True

    def _unstart(self, work: Work) -> None:
        self._records.unstart(work.key)
        self._mark_dirty()

    async def _checkout(self, work: Work) -> Checkout:
        config = self.config
        holder = f"{config.name}/{work.key}"
        checkout = await self._dispatcher.checkout(
            work.pool,
            timeout=config.checkout_timeout(work.pool),
            priority=config.priority,
            holder=holder,
            waiting=self._notes,
        )
        if work.last_agent is None or checkout.agent != work.last_agent:
            return checkout
        # A retry goes to another agent when one is free at once; else to the same one.
        try:
            other = await self._dispatcher.checkout(
                work.pool, timeout=0.0, priority=config.priority, holder=holder
            )
        except CheckoutFailed:
            return checkout
        except BaseException:
            await self._dispatcher.checkin(checkout, "unused")
            raise
        # The first agent goes back untouched: its failure streak must survive the swap, or a
        # broken agent would never be quarantined.
        await self._dispatcher.checkin(checkout, "unused")
        return other

    async def _attempt(self, work: Work, checkout: Checkout) -> None:
        config = self.config
        envelope = {
            "id": work.key,
            "item": work.value,
            "input": config.input,
            "attempt": work.attempt,
            "run": config.name,
        }
        try:
            result = await self._invoker.invoke(
                checkout,
                envelope,
                timeout=config.call_timeout(work.pool),
                cast=config.mode == "Cast",
            )
        except Exception as error:  # the agent client's own bug must cost one attempt, not the run
            await self._dispatcher.checkin(checkout, "lost")
            self._after_failure(work, checkout.agent, Reason.CALL_FAILED, repr(error))
            return
        if not result.ok and result.reason == Reason.UNAUTHORIZED:
            await self._dispatcher.checkin(checkout, "lost")
            self._refused(work, checkout.agent)
            return
        ok, output = result.ok, result.output
        # Encoded once, for the size limit, the result ConfigMap and the journal alike.
        encoded = encode(output) if ok else ""
        size = len(encoded.encode())
        if size > CHUNK_BYTES - 1024:
            ok = False
            reason: str = Reason.OUTPUT_TOO_LARGE
            message = f"output of {size} bytes exceeds {CHUNK_BYTES - 1024}"
        else:
            reason, message = result.reason, result.message
        await self._dispatcher.checkin(
            checkout, "lost" if result.lost else ("success" if result.ok else "failure")
        )
        if ok:
            self._records.output(work.key, output, encoded=encoded)
            return
        self._after_failure(work, checkout.agent, reason or Reason.CALL_FAILED, message)

    def _refused(self, work: Work, agent: str) -> None:
        """The agent refused the operator's own token (it holds another): that is for the
        operator to mend, not a failure of the item. The agent is retired (the pool replaces
        it) and the item waits for another, with its attempt unchanged."""
        self._unstart(work)
        work.refused += 1
        work.last_agent = agent
        delay = min(REFUSED_MAX, 0.1 * 2 ** (work.refused - 1))
        self._retries.append((self._clock.now() + delay, work))
        self._wake.set()
        self._report.agent_refused(agent, work.key)

    def _after_failure(self, work: Work, agent: str, reason: str, message: str) -> None:
        if work.attempt < self.config.max_attempts:
            self.ledger.attempts.await_retry(work.key)
            work.attempt += 1
            work.last_agent = agent
            # The first retry waits backoffSeconds, each further one twice as long.
            delay = self.config.backoff_seconds * 2 ** (work.attempt - 2)
            due = self._clock.now() + delay
            self._retries.append((due, work))
            # The loop arms its timer for the retry.
            self._wake.set()
            return
        self._records.failure(
            work.key, reason=reason, message=message, attempts=work.attempt, agent=agent
        )
        self._report.item_failed(work.key, reason, message)

    def _promote_retries(self, now: float) -> None:
        if not self._retries:
            return
        due = [entry for entry in self._retries if entry[0] <= now]
        if due:
            self._retries = [entry for entry in self._retries if entry[0] > now]
            self._pending.extendleft(work for _, work in reversed(due))

    def _task_done(self, _: asyncio.Task[None]) -> None:
        self._wake.set()

    def _reap(self) -> None:
        for task in [task for task in self._tasks if task.done()]:
            self._tasks.discard(task)
            task.result()

    def _next_deadline(self) -> float | None:
        deadlines = [due for due, _ in self._retries]
        write_at = self._report.next_write_at(held=self._held_on_write())
        if write_at is not None:
            deadlines.append(write_at)
        if self._may_dispatch() and self._intake.next_poll > self._clock.now():
            # The source said nothing is ready yet: ask again after the back-off.
            deadlines.append(self._intake.next_poll)
        return min(deadlines) if deadlines else None

    async def _wait(self, deadline: float | None) -> None:
        """Until something wakes the loop, or ``deadline``.

        The loop turns about once per item, and its deadline (the next status write) seldom
        changes between turns: one timer stays armed for it instead of a new one each turn.
        """
        if deadline != self._timer_at or self._timer is None or self._timer.done():
            self._disarm()
            if deadline is not None:
                self._timer_at = deadline
                self._timer = asyncio.ensure_future(self._ring(deadline))
        await self._wake.wait()

    async def _ring(self, deadline: float) -> None:
        await self._clock.sleep(deadline - self._clock.now())
        self._wake.set()

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = None, None

    def _outcome(self) -> Outcome | None:
        return outcome_now(
            policy=self.config.failures,
            total=self._total(),
            done=self.ledger.succeeded + self.ledger.failed,
            failed=self.ledger.failed,
            drained=self._drained(),
            suspended=self._suspended,
            source_error=self._source_error,
            source_reason=self._source_reason,
            deadlock=self._deadlock,
            missing=self._missing_pools.values() if self._parked else (),
        )

    def _drained(self) -> bool:
        return self._intake.done and not self._pending and not self._retries

    def _total(self) -> int:
        known = self._source.total
        if known is not None:
            return known
        return max(self.ledger.seen, self.ledger.succeeded + self.ledger.failed)

    def _pools_text(self) -> str:
        if self.config.routes is None:
            return f"pool {self.config.pool}"
        return "pools " + ", ".join(sorted(set(self.config.routes.pools.values())))
