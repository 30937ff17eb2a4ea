"""How a run reports: batched status writes, conditions, and rate-limited Events.

The engine says status has news (:meth:`Reporter.changed`) as things happen and asks
:class:`Reporter` to write when :func:`flush_due` allows, at most once per interval (sooner when
dispatch waits on the write) and once at the end; ConfigMaps go before the status that names
them, and a write that fails on a passing API error is retried. Each write seals the run's
journal as of its snapshot and releases those entries once it succeeded. Events are posted for
the run's milestones (the Suspended phase once a suspended run is idle, :meth:`follow_suspension`);
ItemFailed ones at most once per interval, each counting the failures held back since the last.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterable

from agentpool.api import PoolRunStatus, RawRunStatus, RunPhase
from agentpool.api.conditions import condition_wire, format_time
from agentpool.api.reasons import EventReason
from agentpool.runs.contracts import Journal, StatusSink
from agentpool.runs.ending import RunEnd, final_conditions, running_conditions
from agentpool.runs.shared import RunShared
from agentpool.runs.status import flush_due
from agentpool.runs.waits import Waits

WRITE_RETRY_DELAYS = (0.5, 1.0, 2.0)


class Reporter:
    """The run's status and Events, written economically."""

    def __init__(
        self,
        shared: RunShared,
        *,
        sink: StatusSink,
        status: PoolRunStatus,
        interval: float,
        failure_event_interval: float,
        held_gap: float = 0.0,
        journal: Journal | None = None,
        waits: Waits | None = None,
    ) -> None:
        self._sink = sink
        self._waits = waits or Waits()
        # The Waiting condition's reason and message as last written, and when it next reads
        # differently without news (the time waited reaches its next step).
        self._waiting: tuple[str, str, float] | None = None
        self._waiting_at: float | None = None
        # status.message as last written: a running run's is what it waits for, if anything.
        self._message: str | None = status.message
        self._journal = journal
        self._clock = shared.clock
        self._ledger = shared.ledger
        self._interval = interval
        self._held_gap = held_gap
        self._failure_event_interval = failure_event_interval
        started = status.start_time
        self.start_time = None if started is None else format_time(started)
        self._conditions = [condition_wire(condition) for condition in status.conditions]
        self._conditions_dirty = True
        self.phase: RunPhase = "Running"
        self._dirty = True
        # The Suspended phase is written: a resume writes Running again.
        self._suspend_written = False
        self._last_write: float | None = None
        self._last_failure_event: float | None = None
        self._failures_held = 0
        self._events: set[asyncio.Task[None]] = set()
        self._refused_agents: set[str] = set()
        # The end's fields once decided: any later write (the one made as the engine is
        # cancelled mid-finish) says all of them again, never phase Failed alone.
        self._end: RawRunStatus | None = None

    async def begin(self, message: str) -> None:
        """Mark the run started, unless it started before an operator restart."""
        if self.start_time is None:
            self.start_time = format_time(self._clock.now())
            await self._sink.event("Normal", EventReason.STARTED, message)

    def changed(self) -> bool:
        """Status has news; True when it had none since the last write (the engine then arms
        its write timer)."""
        if self._dirty:
            return False
        self._dirty = True
        return True

    def due(self, *, held: bool = False) -> bool:
        """Whether to write now; ``held``: dispatch waits on this write (see :func:`flush_due`)."""
        now = self._clock.now()
        stale = self._waiting_at is not None and now >= self._waiting_at
        return (self._dirty or stale) and flush_due(
            now=now,
            last_write=self._last_write,
            interval=self._interval,
            held=held,
            held_gap=self._held_gap,
        )

    def next_write_at(self, *, held: bool = False) -> float | None:
        if self._last_write is None:
            return None
        if self._dirty:
            gap = min(self._held_gap, self._interval) if held else self._interval
            return self._last_write + gap
        if self._waiting_at is not None:
            return max(self._waiting_at, self._last_write + self._interval)
        return None

    async def write(
        self,
        *,
        total: int,
        extra: RawRunStatus | None = None,
        declare: Iterable[tuple[str, int]] = (),
    ) -> None:
        """Write what changed: result ConfigMaps first, then the status patch naming them.

        ``declare``: items about to start, written in flight (see :meth:`RunLedger.take_flush`).
        """
        now = self._clock.now()
        if extra is None:
            extra = self._end
        fields: RawRunStatus = {"phase": self.phase, "total": total}
        if self.start_time is not None:
            fields["startTime"] = self.start_time
        waiting = self._waits.condition(now)
        self._waiting_at = self._waits.next_change(now)
        if "conditions" not in (extra or {}):
            # While the run waits, its message says what for (a finished run's says how it
            # ended); null removes it once the wait is over.
            message = waiting[1] if waiting is not None else None
            if message != self._message:
                fields["message"] = self._message = message
            if waiting != self._waiting:
                self._waiting = waiting
                self._conditions_dirty = True
        if self._conditions_dirty:
            self._conditions = running_conditions(
                self._conditions, suspended=self.phase == "Suspended", waiting=waiting, now=now
            )
            fields["conditions"] = self._conditions
            self._conditions_dirty = False
        fields.update(extra or {})
        flush = self._ledger.take_flush(fields, declare=declare)
        # The journal's entries so far are all in this snapshot; later ones go to a new segment.
        mark = self._journal.seal() if self._journal is not None else None
        # Clean as of the snapshot just taken: what changes while the writes below are awaited
        # (an item finishing) marks it dirty again, and must not be wiped out afterwards, or
        # nothing would ever write it.
        self._dirty = False
        try:
            for name, data in flush.configmaps:
                await self._retrying(
                    functools.partial(self._sink.write_results_configmap, name, data)
                )
            await self._retrying(functools.partial(self._sink.write, flush.patch))
        except BaseException:
            self._dirty = True
            raise
        self._last_write = now
        if self._journal is not None and mark is not None:
            self._journal.release(mark)

    async def _retrying(self, write: Callable[[], Awaitable[None]]) -> None:
        """A write that a passing API error does not lose: retried, then the error is raised."""
        for delay in WRITE_RETRY_DELAYS:
            try:
                await write()
                return
            except Exception:  # the sink's errors are the API client's; any of them may pass
                await self._clock.sleep(delay)
        await write()

    async def follow_suspension(self, suspended: bool, *, idle: bool, total: int) -> None:
        """Write the Suspended phase once a suspended run has nothing in flight (``idle``), and
        Running again once it resumes."""
        if suspended and idle and not self._suspend_written:
            self._suspend_written = True
            await self.suspended(total=total)
        elif not suspended and self._suspend_written:
            self._suspend_written = False
            await self.resumed()

    async def suspended(self, *, total: int) -> None:
        """Write the Suspended phase, and say so in an Event."""
        self.phase = "Suspended"
        self._conditions_dirty = True
        await self.write(total=total)
        await self._sink.event(
            "Normal", EventReason.SUSPENDED, "suspended: nothing in flight, nothing dispatched"
        )

    async def resumed(self) -> None:
        """Running again: the next write says so, and an Event at once."""
        self.phase = "Running"
        self._conditions_dirty = True
        self._dirty = True
        await self._sink.event("Normal", EventReason.RESUMED, "resumed: dispatching again")

    def item_failed(self, key: str, reason: str, message: str) -> None:
        """Post an ItemFailed event, unless one went out less than an interval ago."""
        now = self._clock.now()
        last = self._last_failure_event
        if last is not None and now - last < self._failure_event_interval:
            self._failures_held += 1
            return
        text = f"item {key} failed ({reason}): {message}"
        if self._failures_held:
            text += f"; {self._failures_held} more failed since the last such event"
        self._failures_held = 0
        self._last_failure_event = now
        task = asyncio.ensure_future(
            self._sink.event("Warning", EventReason.ITEM_FAILED, text[:1000])
        )
        self._events.add(task)
        task.add_done_callback(self._events.discard)

    def agent_refused(self, agent: str, key: str) -> None:
        """Post an AgentUnauthorized event, once per agent."""
        if agent in self._refused_agents:
            return
        self._refused_agents.add(agent)
        text = (
            f"agent {agent} refused the pool's token (it holds another): it is replaced, and "
            f"item {key} goes to another agent without counting an attempt"
        )
        task = asyncio.ensure_future(
            self._sink.event("Warning", EventReason.AGENT_UNAUTHORIZED, text)
        )
        self._events.add(task)
        task.add_done_callback(self._events.discard)

    async def finish(self, end: RunEnd, *, total: int) -> None:
        """The last write and the closing Event: Drained, Deadlocked or SourceFailed."""
        now = self._clock.now()
        self.phase = end.phase
        self._conditions = final_conditions(self._conditions, end, now=now)
        self._conditions_dirty = False
        extra: RawRunStatus = {
            "message": end.message,
            "completionTime": format_time(now),
            "conditions": self._conditions,
        }
        if end.result is not None:
            extra["result"] = end.result
        self._end = extra
        await self.write(total=total, extra=extra)
        kind = "Normal" if end.phase == "Succeeded" else "Warning"
        await self._sink.event(kind, end.result or end.reason, end.message)

    async def close(self) -> None:
        """Wait for the Events still on their way."""
        await asyncio.gather(*self._events, return_exceptions=True)
