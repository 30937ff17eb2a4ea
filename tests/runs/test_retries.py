"""When a failed item goes again: the back-off doubles up to the last attempt, and a refusal of
the operator's token costs no attempt.

Table tests of :func:`after_failure` and :func:`after_refusal`, and of :class:`Retries` holding
items until they are due and recording the failures that are final.
"""

from __future__ import annotations

import pytest
from runfakes import FakeSink, run_config, run_shared

from agentpool.api import PoolRunStatus
from agentpool.runs.backlog import Work
from agentpool.runs.reporting import Reporter
from agentpool.runs.retries import Retries, after_failure, after_refusal
from agentpool.runs.status import RunLedger
from agentpool.settings import RunSettings

REFUSED_MAX = RunSettings().refused_max_seconds

WORK = Work(key="a", index=0, value={}, pool="workers")


@pytest.mark.parametrize(
    ("attempt", "max_attempts", "due"),
    [
        (1, 3, 102.0),  # the first retry waits backoffSeconds
        (2, 3, 104.0),  # the next twice as long
        (3, 3, None),  # the last attempt failed: no more
        (1, 1, None),
    ],
)
def test_a_failed_attempt_goes_again_after_a_doubling_back_off(
    attempt: int, max_attempts: int, due: float | None
) -> None:
    """Each retry waits twice as long as the one before; after maxAttempts the item is done."""
    work = Work(key="a", index=0, value={}, pool="workers", attempt=attempt)
    retry = after_failure(work, "pod-1", max_attempts=max_attempts, backoff_seconds=2.0, now=100.0)
    if due is None:
        assert retry is None
        return
    assert retry == (due, Work("a", 0, {}, "workers", attempt=attempt + 1, last_agent="pod-1"))


@pytest.mark.parametrize(("refused", "delay"), [(0, 0.1), (1, 0.2), (2, 0.4), (10, REFUSED_MAX)])
def test_a_refused_item_waits_a_growing_while_with_its_attempt_unchanged(
    refused: int, delay: float
) -> None:
    """A refusal is for the operator to mend: the same attempt goes again, soon, elsewhere."""
    work = Work(key="a", index=0, value={}, pool="workers", attempt=2, refused=refused)
    due, retry = after_refusal(work, "pod-1", now=100.0, most=REFUSED_MAX)
    assert due == pytest.approx(100.0 + delay)
    assert (retry.attempt, retry.refused, retry.last_agent) == (2, refused + 1, "pod-1")


class Clock:
    def __init__(self) -> None:
        self.time = 100.0

    def now(self) -> float:
        return self.time

    async def sleep(self, seconds: float) -> None:
        self.time += seconds


def retries(
    clock: Clock, ledger: RunLedger, sink: FakeSink, wakes: list[str]
) -> tuple[Retries, Reporter]:
    shared = run_shared(ledger, clock=clock, wake=lambda: wakes.append("wake"))
    report = Reporter(
        shared, sink=sink, status=PoolRunStatus(), interval=1.0, failure_event_interval=5.0
    )
    config = run_config("run", pool="workers", max_attempts=2, backoff_seconds=1.0)
    waiting = Retries(config, shared, report=report, refused_max=REFUSED_MAX)
    return waiting, report


async def test_retries_wait_until_due_and_the_last_failure_is_recorded() -> None:
    """A failed item waits out its back-off and comes back in order; once its attempts are
    spent it is recorded failed, with the agent that failed it last."""
    clock, ledger, sink = Clock(), RunLedger(run="run", replayable=True), FakeSink()
    wakes: list[str] = []
    waiting, report = retries(clock, ledger, sink, wakes)
    ledger.start("a", attempt=1)
    ledger.start("b", attempt=1)
    waiting.failed(WORK, "pod-1", "AgentError", "no")
    waiting.failed(Work(key="b", index=1, value={}, pool="workers"), "pod-2", "AgentError", "no")
    assert (ledger.attempts.retrying, ledger.attempts.active, wakes) == (
        {"a": 1, "b": 1},
        0,
        ["wake"] * 2,
    )
    assert waiting.next_due() == 101.0
    assert waiting.take_due(100.5) == []
    [a, b] = waiting.take_due(101.0)
    assert (a.key, a.attempt, b.key) == ("a", 2, "b")
    assert not waiting
    assert waiting.next_due() is None
    ledger.start("a", attempt=2)
    waiting.failed(a, "pod-3", "AgentError", "still no")
    assert ledger.recorded == {"a"}
    assert ledger.take_flush({}).patch["failures"] == {
        "a": {"reason": "AgentError", "message": "still no", "attempts": 2, "agent": "pod-3"}
    }
    await report.close()
    assert sink.reasons() == ["ItemFailed"]


async def test_a_refusal_schedules_the_same_attempt_and_says_so_once_per_agent() -> None:
    """The item is due again shortly; the agent's refusal is posted as an Event once."""
    clock, ledger, sink = Clock(), RunLedger(run="run", replayable=True), FakeSink()
    wakes: list[str] = []
    waiting, report = retries(clock, ledger, sink, wakes)
    waiting.refused(WORK, "pod-1")
    waiting.refused(WORK.refused_by("pod-1"), "pod-1")
    [first, second] = waiting.take_due(101.0)
    assert (first.attempt, first.refused, second.refused) == (1, 1, 2)
    assert wakes == ["wake", "wake"]
    await report.close()
    assert sink.reasons() == ["AgentUnauthorized"]
