"""The PoolRun engine: drives a run's items through its pools, and reports as it goes.

It keeps up to ``cap`` items in flight, each one a checkout, a call and a checkin; retries failed
attempts with back-off (to another agent when one is free); records every verdict in its ledger
and its journal, when it has one, so that an operator crash re-runs only what was in flight;
writes status in batches; and ends Drained or Deadlocked. The kopf daemon of a PoolRun builds one
per run with the injected dispatcher, sink, journal and clock, and awaits
:meth:`RunEngine.run`; it calls :meth:`RunEngine.set_suspended` when ``spec.suspend`` changes.

This module is the loop that joins the parts. The :mod:`~agentpool.runs.intake` takes items
from the source and names them; the :mod:`~agentpool.runs.feed` admits them into its
:mod:`~agentpool.runs.backlog` and lets the next through; the :mod:`~agentpool.runs.lanes` carry
them, each attempt made by :mod:`~agentpool.runs.calls`; :mod:`~agentpool.runs.retries` decide
when a failed one goes again; :mod:`~agentpool.runs.journaling` records verdicts in the ledger
and the journal; :mod:`~agentpool.runs.reporting` writes status; the :mod:`~agentpool.runs.alarm`
wakes the loop. Each part takes the run's :class:`~agentpool.runs.shared.RunShared` (its clock,
ledger, recorder, wait notes and signals), made once here, and only what is its own besides.
Decisions are the pure functions of those modules.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

from agentpool.api import PoolRunStatus
from agentpool.runs.alarm import Alarm
from agentpool.runs.calls import AgentCalls
from agentpool.runs.config import RunConfig
from agentpool.runs.contracts import Clock, Dispatcher, Journal, StatusSink, SystemClock
from agentpool.runs.ending import RunEnd, end_now
from agentpool.runs.feed import Feed
from agentpool.runs.intake import Intake
from agentpool.runs.journaling import Recorder, decode_entry, replay
from agentpool.runs.lanes import Lanes
from agentpool.runs.reporting import Reporter
from agentpool.runs.retries import Retries
from agentpool.runs.shared import RunShared
from agentpool.runs.sources import ItemSource
from agentpool.runs.waits import WaitNotes, Waits
from agentpool.settings import RunSettings


class RunEngine:
    """One PoolRun, from its first item to Drained or Deadlocked."""

    def __init__(
        self,
        config: RunConfig,
        *,
        source: ItemSource,
        dispatcher: Dispatcher,
        sink: StatusSink,
        clock: Clock | None = None,
        status: PoolRunStatus | None = None,
        configmaps: Mapping[str, Mapping[str, str]] | None = None,
        suspended: bool = False,
        settings: RunSettings | None = None,
        journal: Journal | None = None,
    ) -> None:
        self.config = config
        settings = settings or RunSettings()
        self._source = source
        self._clock = clock or SystemClock()
        self._alarm = Alarm(self._clock)
        waits = Waits()
        self._notes = WaitNotes(waits, self._clock, self._changed)
        self._suspended = suspended
        status = status or PoolRunStatus()
        entries = [decode_entry(raw) for raw in journal.load()] if journal is not None else []
        self.ledger = replay(
            entries,
            run=config.name,
            replayable=source.replayable,
            status=status,
            configmaps=configmaps,
        )
        self._records = Recorder(self.ledger, journal)
        shared = RunShared(
            clock=self._clock,
            ledger=self.ledger,
            records=self._records,
            waiting=self._notes,
            wake=self._alarm.wake,
            changed=self._changed,
        )
        self._report = Reporter(
            shared,
            sink=sink,
            status=status,
            interval=settings.status_interval_seconds,
            failure_event_interval=settings.failure_event_interval_seconds,
            held_gap=settings.held_write_gap_seconds,
            journal=journal,
            waits=waits,
        )
        self._retries = Retries(
            config, shared, report=self._report, refused_max=settings.refused_max_seconds
        )
        intake = Intake(
            source, shared, id_field=config.spec.item_id, settings=settings, cap=config.spec.cap
        )
        self._intake = intake
        self._feed = Feed(
            config,
            shared,
            intake=intake,
            retries=self._retries,
            report=self._report,
            rerun_limit=config.effective_rerun_limit(
                replayable=source.replayable, journaled=journal is not None
            ),
        )
        self._lanes = Lanes(
            config.spec.cap,
            shared,
            feed=self._feed,
            calls=AgentCalls(config, dispatcher=dispatcher, waiting=self._notes),
            retries=self._retries,
            intake=intake,
            may_start=self._may_dispatch,
        )

    def set_suspended(self, suspended: bool) -> None:
        """Follow ``spec.suspend``: finish what is in flight and dispatch nothing more, or go on."""
        if suspended != self._suspended:
            self._suspended = suspended
            self._alarm.wake()

    def stop_source(self, reason: str, message: str) -> None:
        """The source can no longer be trusted (it changed under the run): start nothing more,
        let what is in flight finish, and fail the run with ``reason``."""
        if self._feed.stop(reason, message):
            self._alarm.wake()

    async def run(self) -> RunEnd:
        """Drive the run to its end, and return how it ended (also written to status)."""
        try:
            return await self._run()
        except asyncio.CancelledError:
            # The operator is stopping: keep what is done, so the next one resumes from there.
            await self._lanes.stop()
            with contextlib.suppress(Exception):
                await self._report.write(total=self._total())
            raise
        finally:
            self._alarm.disarm()
            await self._lanes.stop()
            await self._report.close()
            await self._intake.close()

    async def _run(self) -> RunEnd:
        await self._report.begin(f"dispatching to {self._pools_text()}, cap {self.config.spec.cap}")
        while True:
            self._alarm.clear()
            self._lanes.reap()
            now = self._clock.now()
            self._feed.promote(now)
            if self._may_dispatch():
                await self._lanes.fill(now)
            await self._report.follow_suspension(
                self._suspended, idle=not self._lanes, total=self._total()
            )
            if not self._lanes:
                end = self._end()
                if end is not None:
                    await self._report.finish(end, total=self._total())
                    self._records.discard()
                    return end
            if self._report.due(held=self._held_on_write()):
                declare = await self._feed.upcoming(now) if self._may_dispatch() else []
                await self._report.write(total=self._total(), declare=declare)
                # The write may have opened the gate on items waiting to start.
                continue
            await self._alarm.wait(self._next_deadline())

    def _may_dispatch(self) -> bool:
        """Whether items may start: not suspended, deadlocked, or without a source."""
        return not (self._suspended or self._lanes.deadlock or self._feed.source_error)

    def _held_on_write(self) -> bool:
        # With nothing running, every unwritten item is done: a write frees the whole limit.
        return self._feed.held and not self._lanes

    def _changed(self) -> None:
        """Status has news: the loop arms its write timer the first time after a write."""
        if self._report.changed():
            self._alarm.wake()

    def _next_deadline(self) -> float | None:
        deadlines = [
            self._retries.next_due(),
            self._report.next_write_at(held=self._held_on_write()),
        ]
        if self._may_dispatch() and self._intake.next_poll > self._clock.now():
            # The source said nothing is ready yet: ask again after the back-off.
            deadlines.append(self._intake.next_poll)
        return min((at for at in deadlines if at is not None), default=None)

    def _end(self) -> RunEnd | None:
        return end_now(
            policy=self.config.spec.failures,
            total=self._total(),
            done=self.ledger.succeeded + self.ledger.failed,
            failed=self.ledger.failed,
            drained=self._feed.drained,
            suspended=self._suspended,
            source_error=self._feed.source_error,
            source_reason=self._feed.source_reason,
            deadlock=self._lanes.deadlock,
            missing=self._feed.missing(),
        )

    def _total(self) -> int:
        known = self._source.total
        if known is not None:
            return known
        return max(self.ledger.seen, self.ledger.succeeded + self.ledger.failed)

    def _pools_text(self) -> str:
        if self.config.routes is None:
            return f"pool {self.config.pool}"
        return "pools " + ", ".join(sorted(set(self.config.routes.pools.values())))
