"""The run's reporter: news makes a write due once per interval, and suspension is written once.

Unit tests of :class:`Reporter` alone, on a fake clock and a fake sink: the engine marks news
through :meth:`Reporter.changed` and follows ``spec.suspend`` through
:meth:`Reporter.follow_suspension`, never by setting the reporter's fields.
"""

from __future__ import annotations

import asyncio
import contextlib

from runfakes import FakeSink, run_shared

from agentpool.api import PoolRunStatus, RawRunStatus
from agentpool.api.reasons import Reason
from agentpool.runs.ending import RunEnd
from agentpool.runs.reporting import Reporter


class Clock:
    """Time that moves only when the test moves it."""

    def __init__(self) -> None:
        self.time = 1_700_000_000.0

    def now(self) -> float:
        return self.time

    async def sleep(self, seconds: float) -> None:
        self.time += seconds


def reporter(clock: Clock, sink: FakeSink) -> Reporter:
    return Reporter(
        run_shared(clock=clock),
        sink=sink,
        status=PoolRunStatus(),
        interval=1.0,
        failure_event_interval=5.0,
    )


async def test_news_after_a_write_makes_the_next_one_due_an_interval_later() -> None:
    """The first news after a write says so (the engine arms its timer then); more news before
    the next write does not; the write is due once the interval has passed."""
    clock, sink = Clock(), FakeSink()
    report = reporter(clock, sink)
    assert report.due(), "the first write goes at once"
    await report.write(total=0)
    assert not report.due(), "nothing new since the write"
    assert report.next_write_at() is None
    assert report.changed() is True
    assert report.changed() is False, "already dirty: no second wake"
    assert not report.due()
    assert report.next_write_at() == clock.now() + 1.0
    clock.time += 1.0
    assert report.due()


async def test_a_suspended_run_is_written_once_and_resumed_once() -> None:
    """Suspended is written when nothing is in flight any more, once; a resume writes Running
    again and says so in an Event."""
    clock, sink = Clock(), FakeSink()
    report = reporter(clock, sink)
    await report.follow_suspension(True, idle=False, total=3)
    assert sink.writes == 0, "items still in flight: not suspended yet"
    await report.follow_suspension(True, idle=True, total=3)
    await report.follow_suspension(True, idle=True, total=3)
    assert (sink.writes, sink.status["phase"]) == (1, "Suspended")
    assert sink.reasons() == ["Suspended"]
    await report.follow_suspension(False, idle=True, total=3)
    await report.follow_suspension(False, idle=True, total=3)
    assert sink.reasons() == ["Suspended", "Resumed"]
    clock.time += 1.0
    assert report.due(), "the resume is news for the next write"
    await report.write(total=3)
    assert sink.status["phase"] == "Running"


class HeldSink(FakeSink):
    """A sink whose writes wait while ``held`` is clear: the API server is slow to answer."""

    def __init__(self) -> None:
        super().__init__()
        self.held = asyncio.Event()
        self.held.set()
        self.waiting = asyncio.Event()

    async def write(self, patch: RawRunStatus) -> None:
        if not self.held.is_set():
            self.waiting.set()
            await self.held.wait()
        await super().write(patch)


async def test_a_run_stopped_while_its_end_is_written_never_reads_failed_without_why() -> None:
    """The replica stops (or the run moves) while the run's last write is on its way; the write
    made as it stops says the whole end again, never phase Failed without the message, the
    conditions and the completion time that say why: the next replica takes a Failed run as over,
    and nobody would know how it ended."""
    clock, sink = Clock(), HeldSink()
    report = reporter(clock, sink)
    await report.write(total=3)
    end = RunEnd("Failed", "Drained", Reason.SOURCE_FAILED, "configmap absent not found")
    sink.held.clear()
    finishing = asyncio.ensure_future(report.finish(end, total=3))
    await sink.waiting.wait()
    finishing.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await finishing
    sink.held.set()
    await report.write(total=3)  # what the engine writes as it is cancelled
    status = sink.status
    assert status["phase"] == "Failed"
    assert status["message"] == "configmap absent not found"
    assert status["completionTime"]
    assert [c["reason"] for c in status["conditions"] if c["type"] == "Failed"] == [
        Reason.SOURCE_FAILED
    ]
