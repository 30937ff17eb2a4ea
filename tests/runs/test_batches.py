"""Batched answers of a source: how an answer is read, how its items run, and what an operator
crash costs a run that takes its items in batches."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st
from runfakes import (
    Dispatching,
    FakeDispatcher,
    FakeInvoker,
    FakeSink,
    KilledJournal,
    crash_after,
    echo,
    run_config,
    run_shared,
    run_until_crash,
    stored,
)

from agentpool.handlers.sources import HttpItemSource
from agentpool.io.journal import FileJournal
from agentpool.io.sources import SourceClient
from agentpool.runs.engine import RunEngine
from agentpool.runs.intake import Intake
from agentpool.runs.sources import DONE, NOT_READY, Batch, Signal, SourceError, read_answer
from agentpool.runs.status import RunLedger
from agentpool.settings import RunSettings
from agentpool.wire.results import iter_results
from clocks import LoopClock

#: Calls, back-offs and status intervals pass on looptime's fake loop time.
pytestmark = pytest.mark.looptime

URL = "http://source.test/next"


@pytest.mark.parametrize(
    ("answer", "read"),
    [
        ({"item": {"n": 1}}, Batch(({"n": 1},))),
        ({"item": None}, NOT_READY),
        ({"done": True}, DONE),
        ({"items": [1, 2, 3]}, Batch((1, 2, 3))),
        ({"items": []}, NOT_READY),
        ({"items": [1], "done": True}, Batch((1,), done=True)),
        ({"items": [], "done": True}, DONE),
        # An item beside "done" is the last one, not dropped.
        ({"item": 7, "done": True}, Batch((7,), done=True)),
        ({"items": [None, 0, ""]}, Batch((None, 0, ""))),
        ({"done": False, "item": 1}, Batch((1,))),
    ],
)
def test_answers_are_read_as_items_nothing_ready_or_done(answer: Any, read: Any) -> None:
    assert read_answer(URL, json.dumps(answer)) == read


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"items": {"n": 1}}', '"items" that is dict, not a list'),
        ('{"items": "abc"}', '"items" that is str, not a list'),
        ('{"items": null}', '"items" that is NoneType, not a list'),
        ('{"item": 1, "items": [2]}', 'both "item" and "items"'),
        ('{"what": 1}', 'neither "item" nor "done"'),
        ('{"done": "yes"}', 'neither "item" nor "done"'),
        ("[1, 2]", "answered list, not an object"),
        ("not json", "answered with invalid JSON"),
        ("[" * 100_000, "answered with invalid JSON"),
    ],
)
def test_malformed_answers_fail_naming_the_source(text: str, message: str) -> None:
    with pytest.raises(SourceError) as caught:
        read_answer(URL, text)
    assert str(caught.value).startswith(f"http source {URL} ")
    assert message in str(caught.value)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
ANSWERS = (
    st.dictionaries(st.sampled_from(["item", "items", "done", "other"]), JSON, max_size=3) | JSON
)


def read_or_error(text: str) -> Batch | Signal | SourceError:
    try:
        return read_answer(URL, text)
    except SourceError as error:
        return error


@given(ANSWERS)
def test_any_json_answer_is_items_a_signal_or_a_clear_error(answer: Any) -> None:
    """Whatever JSON a source answers, the run reads items or a signal from it, or fails with
    a SourceError naming the source: never another exception."""
    read = read_or_error(json.dumps(answer))
    if isinstance(read, SourceError):
        assert str(read).startswith(f"http source {URL} ")
        return
    assert isinstance(read, Batch | Signal)
    if isinstance(read, Batch):
        assert read.values
        given_items = answer["items"] if "items" in answer else [answer["item"]]
        assert list(read.values) == given_items


@given(st.text())
def test_any_text_answer_is_read_or_a_clear_error(text: str) -> None:
    read = read_or_error(text)
    if isinstance(read, SourceError):
        assert str(read).startswith(f"http source {URL} ")
    else:
        assert isinstance(read, Batch | Signal)


class Batches:
    """An unreplayable source that answers as many items as it may (``room``), or ``extra``
    more than that; it notes each ``room`` it was given and every item it gave."""

    replayable = False
    total = None
    name = "a batched source"

    def __init__(self, values: list[Any], *, extra: int = 0) -> None:
        self._values = list(values)
        self._extra = extra
        self.rooms: list[int] = []
        self.given: list[Any] = []

    async def next(self, active: Any, room: int = 1) -> Batch | Signal:
        self.rooms.append(room)
        if not self._values:
            return DONE
        taken = self._values[: room + self._extra]
        del self._values[: len(taken)]
        self.given += taken
        return Batch(tuple(taken), done=not self._values)

    async def close(self) -> None:
        pass


def engine_over(
    source: Batches, clock: LoopClock, sink: FakeSink, *, cap: int, **more: Any
) -> tuple[RunEngine, FakeInvoker]:
    invoker = FakeInvoker(clock, echo())
    config = run_config("run", pool="workers", item_id="id", cap=cap, failures="Report")
    engine = RunEngine(
        config,
        source=source,
        dispatcher=Dispatching(FakeDispatcher(clock, {"workers": cap}), invoker),
        sink=sink,
        clock=clock,
        **more,
    )
    return engine, invoker


async def test_a_batched_run_asks_for_up_to_twice_its_cap_and_runs_every_item() -> None:
    """Each request lets the source send at most twice the cap less the items in flight, at
    least one; every item of every batch runs once, in far fewer requests than items, never
    more than cap at once."""
    values = [{"id": f"b{n}"} for n in range(100)]
    source = Batches(values)
    clock, sink = LoopClock(), FakeSink()
    engine, invoker = engine_over(source, clock, sink, cap=8)
    outcome = await engine.run()
    assert (outcome.phase, outcome.result) == ("Succeeded", "Drained")
    assert sink.status["succeeded"] == 100
    assert sorted(invoker.runs) == sorted(v["id"] for v in values)
    assert set(invoker.runs.values()) == {1}
    assert all(1 <= room <= 16 for room in source.rooms)
    assert source.rooms[0] == 16
    assert len(source.rooms) <= 100 // 6, f"{len(source.rooms)} requests for 100 items"
    assert invoker.most_active <= 8


async def test_an_answer_over_the_limit_loses_nothing() -> None:
    """A source that answers more items than the request allowed has all of them run, no more
    than cap at once."""
    values = [{"id": f"b{n}"} for n in range(30)]
    source = Batches(values, extra=5)
    clock, sink = LoopClock(), FakeSink()
    engine, invoker = engine_over(source, clock, sink, cap=2)
    await engine.run()
    assert sink.status["succeeded"] == 30
    assert invoker.most_active <= 2


async def test_a_duplicate_id_in_a_batch_fails_alone() -> None:
    """Items of a batch are named as single items are: a duplicate id fails that item only."""
    values = [{"id": "a"}, {"id": "b"}, {"id": "a"}, {"id": "c"}]
    source = Batches(values)
    clock, sink = LoopClock(), FakeSink()
    engine, _ = engine_over(source, clock, sink, cap=4)
    await engine.run()
    assert set(sink.status["items"]) == {"a", "b", "c"}
    assert [f["reason"] for f in sink.status["failures"].values()] == ["DuplicateId"]


async def test_a_batch_size_is_capped_by_the_settings() -> None:
    intake = Intake(Batches([]), run_shared(), cap=1000, settings=RunSettings(source_batch_max=16))
    assert intake.room() == 16
    ledger = RunLedger.restore("run", replayable=False, status=stored({"inFlight": {}}))
    ledger.start("x", attempt=1)
    assert Intake(Batches([]), run_shared(ledger), cap=3).room() == 5


class Rehanding(Batches):
    """The source after an operator restart: it hands out again, first, the items it gave that
    the run has not recorded (as the README asks of a source service), then the rest."""

    def __init__(self, again: list[Any], rest: list[Any]) -> None:
        super().__init__([*again, *rest])


async def test_items_taken_ahead_run_again_after_a_crash_as_first_attempts(
    tmp_path: Path,
) -> None:
    """The operator is killed while items of a batch wait for a lane. After the restart, the
    source hands out again what the run has not recorded: every item is recorded once; those
    that were in flight run with their attempt raised, as single items do, and those that were
    waiting, which no agent saw, run as their first attempt. Nothing taken is lost."""
    values = [{"id": f"b{n:03}"} for n in range(120)]
    source = Batches(values)
    clock, sink = LoopClock(), FakeSink()
    journal = KilledJournal(tmp_path / "run")
    crashed = asyncio.Event()
    first, invoker = engine_over(source, clock, sink, cap=4, journal=journal)
    crash = crash_after(30, sink, journal, invoker, crashed)
    at_crash: dict[str, Any] = {}

    def kill(made: int) -> None:
        crash(made)
        if crashed.is_set() and not at_crash:
            at_crash["given"] = [value["id"] for value in source.given]
            at_crash["called"] = {key for key, _, _ in invoker.calls}

    invoker.on_call = kill
    await run_until_crash(first, crashed)
    waiting = set(at_crash["given"]) - at_crash["called"]
    assert waiting, "no item of a batch was waiting at the crash"

    status = copy.deepcopy(sink.status)
    configmaps = copy.deepcopy(sink.configmaps)
    recorded = {r["id"] for r in iter_results(status, sink.result_configmaps())}
    recorded |= set(journal.safe)
    again = [value for value in values if value["id"] in set(at_crash["given"]) - recorded]
    rest = [value for value in values if value["id"] not in set(at_crash["given"])]
    # The operator is back.
    sink.frozen = False
    second, rerun = engine_over(
        Rehanding(again, rest),
        clock,
        sink,
        cap=4,
        status=stored(status),
        configmaps=configmaps,
        journal=FileJournal(tmp_path / "run"),
    )
    outcome = await second.run()
    assert outcome.result == "Drained"
    ids = [r["id"] for r in iter_results(sink.status, sink.result_configmaps())]
    assert sorted(ids) == sorted(value["id"] for value in values)
    attempts = {key: attempt for key, attempt, _ in rerun.calls}
    in_flight = at_crash["called"] - recorded
    assert in_flight, "no item was in flight at the crash"
    assert {attempts[key] for key in in_flight} == {2}
    assert {attempts[key] for key in waiting} == {1}


@pytest.fixture
async def batch_service() -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """A source service on loopback that answers up to ``max`` of 50 items a request, and notes
    each request's body and the client's address."""
    state: dict[str, Any] = {"left": [{"id": f"h{n}"} for n in range(50)], "asks": [], "peers": []}

    async def answer(request: web.Request) -> web.Response:
        body = await request.json()
        state["asks"].append(body)
        state["peers"].append(
            request.transport.get_extra_info("peername") if request.transport else None
        )
        if not state["left"]:
            return web.json_response({"done": True})
        items = state["left"][: body["max"]]
        del state["left"][: len(items)]
        return web.json_response({"items": items})

    app = web.Application()
    app.router.add_post("/next", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/next", state
    finally:
        await runner.cleanup()


async def test_a_batched_http_source_runs_over_one_kept_connection(
    batch_service: tuple[str, dict[str, Any]],
) -> None:
    """Through the HTTP source, each request says how many items it may take ("max"), the
    service answers that many, every item runs, and every request goes over one connection."""
    url, state = batch_service
    clock, sink = LoopClock(), FakeSink()
    engine = RunEngine(
        run_config("run", pool="workers", item_id="id", cap=4),
        source=HttpItemSource(SourceClient(url)),
        dispatcher=Dispatching(FakeDispatcher(clock, {"workers": 4}), FakeInvoker(clock, echo())),
        sink=sink,
        clock=clock,
    )
    await engine.run()
    assert sink.status["succeeded"] == 50
    assert all(1 <= ask["max"] <= 8 for ask in state["asks"])
    assert "active" in state["asks"][0]
    assert len(state["asks"]) < 50
    assert len(set(state["peers"])) == 1, "a new connection for some requests"
