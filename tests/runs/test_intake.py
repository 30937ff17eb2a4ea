"""The run's side of its source: each item comes named and numbered, and after an operator
restart a source that does not give its items again goes on where it was."""

from __future__ import annotations

from typing import Any

from runfakes import run_shared, stored

from agentpool.runs.intake import Intake
from agentpool.runs.sources import DONE, Pulled, Signal, inline_source
from agentpool.runs.status import RunLedger


class Feed:
    """An unreplayable source that gives ``values`` once each."""

    replayable = False
    total = None
    name = "a feed"

    def __init__(self, values: list[Any]) -> None:
        self._values = iter(values)

    async def next(self, active: Any, room: int = 1) -> Pulled | Signal:
        value = next(self._values, DONE)
        return value if value is DONE else Pulled(value)

    async def close(self) -> None:
        pass


async def test_items_come_named_by_their_id_in_the_order_given() -> None:
    """Each item has its index in the source and its key; one without an id gets a made-up
    key that no id of the list has, and the source's end is noted."""
    items = [{"id": "a"}, {"n": 1}, {"id": "[1]"}]
    intake = Intake(inline_source(items), run_shared(), id_field="id")
    named = [await intake.take([], 0.0) for _ in items]
    assert [(n.key, n.index) for n in named if n is not None] == [
        ("a", 0),
        ("[1][2]", 1),
        ("[1]", 2),
    ]
    assert await intake.take([], 0.0) is None
    assert intake.done


async def test_an_unreplayable_source_goes_on_after_what_it_gave_before_a_restart() -> None:
    """After a restart the items of a source that does not give them again are numbered on from
    the ledger, and the ids recorded before still count as seen."""
    status = {"total": 5, "items": {"a": 1}, "succeeded": 1}
    ledger = RunLedger.restore("run", replayable=False, status=stored(status))
    intake = Intake(Feed([{"id": "b"}, {"id": "a"}]), run_shared(ledger), id_field="id")
    b = await intake.take([], 0.0)
    a = await intake.take([], 0.0)
    assert b is not None
    assert (b.key, b.index, b.rejection) == ("b", 5, None)
    assert a is not None
    assert a.key == "a[6]"
    assert a.rejection is not None
    assert a.rejection.reason == "DuplicateId"
