"""Which item starts next: the source's items are admitted (recorded ones skipped, unroutable
ones failed at once), retries due go first, and a run without a journal lets an item start
only once a status write named it in flight.

Unit tests of :class:`Feed` over an inline source, with the ledger it changes.
"""

from __future__ import annotations

from typing import Any

from runfakes import run_config, run_parts, stored

from agentpool.api import Routes
from agentpool.runs.backlog import Work
from agentpool.runs.feed import Feed
from agentpool.runs.intake import Intake
from agentpool.runs.retries import Retries
from agentpool.runs.sources import inline_source
from agentpool.runs.status import RunLedger


class Clock:
    def now(self) -> float:
        return 100.0

    async def sleep(self, seconds: float) -> None:
        pass


def feed(
    items: list[Any], *, rerun_limit: int | None = None, status: dict[str, Any] | None = None
) -> tuple[Feed, RunLedger, Retries]:
    config = run_config(
        "run",
        item_id="id",
        routes=Routes(field="kind", pools={"a": "pool-a", "b": "pool-b"}),
        max_attempts=2,
    )
    ledger = RunLedger.restore("run", replayable=True, status=stored(status))
    shared, report, retries = run_parts(config, ledger, Clock())
    intake = Intake(inline_source(items), shared, id_field="id")
    made = Feed(
        config, shared, intake=intake, retries=retries, report=report, rerun_limit=rerun_limit
    )
    return made, ledger, retries


async def test_items_are_admitted_routed_and_started_in_order() -> None:
    """An item recorded before a restart is skipped, one no route names fails at once, the
    rest start in order on the pool their field names."""
    items = [
        {"id": "done", "kind": "a"},
        {"id": "x", "kind": "z"},
        {"id": "y", "kind": "b"},
        {"id": "w", "kind": "a"},
    ]
    started, ledger, _ = feed(items, status={"items": {"done": 1}, "succeeded": 1})
    first = await started.take(0.0)
    second = await started.take(0.0)
    assert first is not None
    assert (first.key, first.pool, first.attempt) == ("y", "pool-b", 1)
    assert second is not None
    assert (second.key, second.pool) == ("w", "pool-a")
    assert await started.take(0.0) is None
    assert ledger.attempts.in_flight == {"y": 1, "w": 1}
    assert ledger.take_flush({}).patch["failures"]["x"]["reason"] == "NoRoute"
    assert ledger.seen == 4
    assert started.drained, "nothing is left to start: the rest is in flight"


async def test_retries_due_start_before_new_items() -> None:
    """A retry whose back-off is over starts before anything new from the source."""
    started, _ledger, retries = feed([{"id": "a", "kind": "a"}, {"id": "b", "kind": "a"}])
    first = await started.take(0.0)
    assert first is not None
    retries.failed(first, "pod-1", "AgentError", "no")
    started.promote(200.0)
    retry = await started.take(200.0)
    assert retry is not None
    assert (retry.key, retry.attempt) == ("a", 2)


async def test_without_a_journal_an_item_starts_once_a_write_named_it() -> None:
    """With a re-run limit the feed is held until a status write declared the next items in
    flight; then they start."""
    started, ledger, _ = feed([{"id": "a", "kind": "a"}, {"id": "b", "kind": "a"}], rerun_limit=1)
    assert await started.take(0.0) is None
    assert started.held
    declare = await started.upcoming(0.0)
    assert declare == [("a", 1)]
    ledger.take_flush({}, declare=declare)
    started.reopen()
    work = await started.take(0.0)
    assert work == Work("a", 0, {"id": "a", "kind": "a"}, "pool-a")
    assert not started.held


async def test_a_stopped_source_says_why_once() -> None:
    """The daemon found the source changed: the feed keeps the first reason it was given."""
    started, _, _ = feed([])
    assert started.stop("SourceChanged", "the source changed")
    assert not started.stop("SourceFailed", "later")
    assert (started.source_reason, started.source_error) == ("SourceChanged", "the source changed")
