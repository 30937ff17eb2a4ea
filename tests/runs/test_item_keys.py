"""Every item of a source ends in exactly one record, whatever ids the items carry.

Keys made up for items without a usable id (``[<index>]``) or with a duplicate one
(``<id>[<index>]``) must never clash with a real id, given before or after them: a clash would
overwrite one record with another or skip an item without a trace.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from runfakes import (
    Dispatching,
    FakeDispatcher,
    FakeInvoker,
    FakeSink,
    echo,
    run_config,
)

from agentpool.runs.engine import RunEngine
from agentpool.runs.sources import DONE, Pulled, inline_source
from agentpool.wire.results import iter_results
from clocks import LoopClock

#: Calls, back-offs and status intervals pass on looptime's fake loop time.
pytestmark = pytest.mark.looptime

# Ids shaped like the keys the engine makes up, so clashes are likely, not just possible.
IDS = st.one_of(
    st.sampled_from(["a", "same", "[0]", "[1]", "[2]", "same[1]", "same[2]", "a[0]", "a[1]"]),
    st.builds(
        lambda base, n: f"{base}[{n}]", st.sampled_from(["", "a", "same", "[1]"]), st.integers(0, 4)
    ),
    st.text(max_size=4),
    st.integers(0, 3),
)
ITEMS = st.lists(
    st.one_of(st.builds(lambda i: {"id": i}, IDS), st.just({"n": 1}), st.just({"id": ""})),
    max_size=8,
)


class Feed:
    """An unreplayable source, like the HTTP one: its ids are not known before they come."""

    replayable = False
    total = None
    name = "a feed of ids"

    def __init__(self, values: list[Any]) -> None:
        self._values = iter(values)

    async def next(self, active: Any, room: int = 1) -> Any:
        value = next(self._values, DONE)
        return value if value is DONE else Pulled(value)

    async def close(self) -> None:
        pass


async def drive(items: list[Any], *, replayable: bool) -> tuple[dict[str, Any], int]:
    clock = LoopClock()
    invoker = FakeInvoker(clock, echo())
    sink = FakeSink()
    engine = RunEngine(
        run_config("run", pool="workers", item_id="id", failures="Report", cap=3),
        source=inline_source(items) if replayable else Feed(items),
        dispatcher=Dispatching(FakeDispatcher(clock, {"workers": 3}), invoker),
        sink=sink,
        clock=clock,
    )
    await engine.run()
    return sink.status, len(invoker.calls)


def check_every_item_recorded_once(items: list[Any], status: dict[str, Any], calls: int) -> None:
    records = list(iter_results(status, sink_configmaps(status)))
    keys = [record["id"] for record in records]
    assert len(keys) == len(set(keys)) == len(items)
    assert status["succeeded"] + status["failed"] == status["total"] == len(items)
    # Each item that is valid and the first with its id runs once, under its own id.
    firsts: dict[str, Any] = {}
    for item in items:
        raw = item.get("id")
        if isinstance(raw, str | int) and raw != "" and str(raw) not in firsts:
            firsts[str(raw)] = item
    assert calls == len(firsts)
    for key, item in firsts.items():
        assert status["items"][key] == {"echo": item}


def sink_configmaps(status: dict[str, Any]) -> list[dict[str, str]]:
    assert not status.get("resultRefs")
    return []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items=ITEMS)
# An item with no id beside one whose id reads like a missing one.
@example(items=[{"n": 1}, {"id": "None"}])
async def test_any_ids_from_a_list_source_end_in_one_record_each(items: list[Any]) -> None:
    """Inline items with any ids (missing, duplicate, shaped like made-up keys): succeeded plus
    failed is the total, and every item has its own record."""
    status, calls = await drive(items, replayable=True)
    check_every_item_recorded_once(items, status, calls)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items=ITEMS)
# An item with no id beside one whose id reads like a missing one.
@example(items=[{"n": 1}, {"id": "None"}])
async def test_any_ids_from_an_http_like_source_end_in_one_record_each(items: list[Any]) -> None:
    """The same holds when ids arrive one by one, so a real id can come after a made-up key
    equal to it."""
    status, calls = await drive(items, replayable=False)
    check_every_item_recorded_once(items, status, calls)


async def test_real_id_shaped_like_a_missing_id_key_keeps_both_records() -> None:
    """``[{id:"[1]"},{n:1},{id:"z"}]``: the item without an id still fails; three records."""
    items: list[Any] = [{"id": "[1]"}, {"n": 1}, {"id": "z"}]
    status, _ = await drive(items, replayable=True)
    assert (status["succeeded"], status["failed"]) == (2, 1)
    assert [f["reason"] for f in status["failures"].values()] == ["MissingId"]


async def test_real_id_shaped_like_a_duplicate_key_runs() -> None:
    """``[{id:"same"},{id:"same"},{id:"same[1]"}]``: the third item runs and is recorded."""
    items: list[Any] = [{"id": "same"}, {"id": "same"}, {"id": "same[1]"}]
    status, calls = await drive(items, replayable=True)
    assert calls == 2
    assert status["items"]["same[1]"] == {"echo": {"id": "same[1]"}}
    assert (status["succeeded"], status["failed"]) == (2, 1)
