"""A run's journal: finished items outlive an operator crash without a status write each."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest
from runfakes import (
    Dispatching,
    FakeDispatcher,
    FakeInvoker,
    FakeSink,
    KilledJournal,
    Result,
    crash_after,
    run_config,
    run_until_crash,
    stored,
)

from agentpool.io.journal import FileJournal, Journals
from agentpool.runs.engine import RunEngine
from agentpool.runs.sources import DONE, Pulled, inline_source
from agentpool.wire.envelopes import EnvelopeBody
from agentpool.wire.results import iter_results
from clocks import LoopClock

#: Calls, back-offs and status intervals pass on looptime's fake loop time.
pytestmark = pytest.mark.looptime


def test_entries_survive_a_reopen_and_a_torn_last_line(tmp_path: Path) -> None:
    """What was flushed is read back by the next operator; an entry never flushed is gone, and
    a line torn by a crash is skipped, not taken for an entry."""
    journal = FileJournal(tmp_path / "run")
    journal.append({"id": "a", "output": {"n": 1}})
    journal.append({"id": "b", "failure": {"reason": "AgentError", "message": "no"}})
    journal.flush()
    journal.append({"id": "lost", "output": "appended, never flushed"})
    # No close: a killed process does not close its files either.
    with (tmp_path / "run" / "00000001.jsonl").open("ab") as segment:
        segment.write(b'{"id": "c", "outp')
    again = FileJournal(tmp_path / "run")
    assert [entry["id"] for entry in again.load()] == ["a", "b"]
    assert again.load()[0]["output"] == {"n": 1}


def test_a_release_drops_only_what_the_write_holds(tmp_path: Path) -> None:
    """A status write releases what was sealed for it; what came after stays, and a finished
    run's journal is removed whole."""
    journal = FileJournal(tmp_path / "run")
    journal.append({"id": "a", "output": 1})
    mark = journal.seal()
    journal.append({"id": "b", "output": 2})
    journal.flush()
    journal.release(mark)
    assert [entry["id"] for entry in journal.load()] == ["b"]
    journal.discard()
    assert not (tmp_path / "run").exists()


def test_an_unwritable_state_directory_means_no_journal(tmp_path: Path) -> None:
    """A state directory that cannot be made gives no journal (and a warning), not an error."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert Journals(blocker).open("uid") is None


def quick(envelope: EnvelopeBody, agent: str) -> tuple[float, Result]:
    """Calls of 10 to 80 ms: hundreds finish between two status writes."""
    n = envelope["item"]["n"]
    return 0.01 + (n * 7 % 8) / 100, Result(ok=True, output={"n": n})


async def test_a_crash_re_runs_only_items_in_flight_and_writes_stay_rare(tmp_path: Path) -> None:
    """With a journal the run is not held to a write per cap items: 2,000 short items at cap 8
    take a handful of writes, and after a crash between two writes every item whose result
    reached the journal is recorded from it; at most cap items run again."""
    count, cap = 2000, 8
    items = [{"id": f"i{n}", "n": n} for n in range(count)]
    config = run_config("run", pool="workers", item_id="id", cap=cap)
    clock = LoopClock()
    sink = FakeSink()
    journal = KilledJournal(tmp_path / "run")
    crashed = asyncio.Event()
    invoker = FakeInvoker(clock, quick)

    invoker.on_call = crash_after(count // 2, sink, journal, invoker, crashed)
    first = RunEngine(
        config,
        source=inline_source(items),
        dispatcher=Dispatching(FakeDispatcher(clock, {"workers": cap}), invoker),
        sink=sink,
        clock=clock,
        journal=journal,
    )
    await run_until_crash(first, crashed)
    written = copy.deepcopy(sink.status)
    writes_before = sink.writes
    recorded_at_crash = {record["id"] for record in iter_results(written, [])}
    unwritten = set(invoker.runs) - recorded_at_crash
    # Far more finished since the last write than cap: without the journal they would run again.
    assert len(unwritten) > 10 * cap
    assert writes_before <= 8, writes_before

    # The operator is back.
    sink.frozen = False
    invoker.on_call, invoker.halted = None, False
    second_calls = len(invoker.calls)
    second = RunEngine(
        config,
        source=inline_source(items),
        dispatcher=Dispatching(FakeDispatcher(clock, {"workers": cap}), invoker),
        sink=sink,
        clock=clock,
        status=stored(written),
        configmaps=copy.deepcopy(sink.configmaps),
        journal=FileJournal(tmp_path / "run"),
    )
    outcome = await second.run()

    assert (outcome.phase, outcome.result) == ("Succeeded", "Drained")
    assert sink.status["succeeded"] == count
    assert {record["id"] for record in iter_results(sink.status, sink.result_configmaps())} == {
        item["id"] for item in items
    }
    rerun = {key for key, runs in invoker.runs.items() if runs > 1}
    assert len(rerun) <= cap
    assert len(journal.safe - recorded_at_crash) > 10 * cap, "the journal held what status did not"
    assert not rerun & journal.safe, "an item whose result was in the journal ran again"
    # Each ran again with its attempt raised: the journal noted its start.
    assert all(attempt == 2 for key, attempt, _ in invoker.calls[second_calls:] if key in rerun)
    assert sink.writes <= 16, sink.writes
    assert not (tmp_path / "run").exists(), "the journal of a finished run is removed"


async def test_a_resumed_run_raises_the_attempt_only_of_items_that_reached_an_agent(
    tmp_path: Path,
) -> None:
    """From the journal: an item that started and never finished runs again with its attempt
    raised; one whose checkout found no agent runs as its first attempt; a finished one not
    at all."""
    journal = FileJournal(tmp_path / "run")
    for entry in (
        {"id": "started", "attempt": 1},
        {"id": "no-agent", "attempt": 1},
        {"id": "no-agent", "unstarted": True},
        {"id": "done", "attempt": 1},
        {"id": "done", "output": {"n": 1}},
    ):
        journal.append(entry)
    journal.close()
    clock = LoopClock()
    sink = FakeSink()
    invoker = FakeInvoker(clock, quick)
    items = [{"id": key, "n": n} for n, key in enumerate(["started", "no-agent", "done"])]
    engine = RunEngine(
        run_config("run", pool="workers", item_id="id", cap=2),
        source=inline_source(items),
        dispatcher=Dispatching(FakeDispatcher(clock, {"workers": 2}), invoker),
        sink=sink,
        clock=clock,
        journal=FileJournal(tmp_path / "run"),
    )
    outcome = await engine.run()
    assert outcome.result == "Drained"
    assert {key: attempt for key, attempt, _ in invoker.calls} == {"started": 2, "no-agent": 1}
    assert sink.status["items"]["done"] == {"n": 1}
    assert sink.status["succeeded"] == 3


def test_a_journal_is_named_by_a_uid_only(tmp_path: Path) -> None:
    """Nothing but a uid names a journal, so a bad name can never remove another directory."""
    journals = Journals(tmp_path)
    for bad in ("", "..", "a/b"):
        with pytest.raises(ValueError, match="uid"):
            journals.discard(bad)
    assert journals.open("0c9f3a52-uid") is not None


class Feed:
    """An unreplayable source, like the HTTP one: each item is handed out once, in order."""

    replayable = False
    total = None
    name = "a feed"

    def __init__(self, count: int) -> None:
        self._values = iter([{"n": n} for n in range(count)])
        self.given: list[dict[str, Any]] = []

    async def next(self, active: Any, room: int = 1) -> Any:
        value = next(self._values, None)
        if value is None:
            return DONE
        self.given.append(value)
        return Pulled(value)

    async def close(self) -> None:
        pass


async def test_items_named_by_index_after_a_crash_are_not_taken_for_recorded_ones(
    tmp_path: Path,
) -> None:
    """Items of an unreplayable source without itemId are named by their index. After a crash
    the run goes on numbering after what its journal holds, so an item given after the restart
    is never mistaken for one recorded before it, and none is dropped."""
    count, cap = 400, 4
    config = run_config("run", pool="workers", cap=cap)
    clock = LoopClock()
    sink = FakeSink()
    journal = KilledJournal(tmp_path / "run")
    crashed = asyncio.Event()
    invoker = FakeInvoker(clock, quick)
    feed = Feed(count)

    invoker.on_call = crash_after(count // 2, sink, journal, invoker, crashed)
    first = RunEngine(
        config,
        source=feed,
        dispatcher=Dispatching(FakeDispatcher(clock, {"workers": cap}), invoker),
        sink=sink,
        clock=clock,
        journal=journal,
    )
    await run_until_crash(first, crashed)
    given_before = len(feed.given)
    # The operator is back.
    sink.frozen = False
    invoker.on_call, invoker.halted = None, False
    second = RunEngine(
        config,
        source=feed,
        dispatcher=Dispatching(FakeDispatcher(clock, {"workers": cap}), invoker),
        sink=sink,
        clock=clock,
        status=stored(copy.deepcopy(sink.status)),
        configmaps=copy.deepcopy(sink.configmaps),
        journal=FileJournal(tmp_path / "run"),
    )
    outcome = await second.run()
    assert outcome.result == "Drained"
    outputs = [r["output"]["n"] for r in iter_results(sink.status, sink.result_configmaps())]
    assert len(outputs) == len(set(outputs)), "two items recorded under one name"
    after = {value["n"] for value in feed.given[given_before:]}
    assert after, "the source gave items after the restart"
    assert after <= set(outputs), f"dropped after the restart: {sorted(after - set(outputs))[:5]}"


def test_a_journal_removed_under_a_running_run_takes_further_entries_quietly(
    tmp_path: Path,
) -> None:
    """The run was deleted and its journal removed while the engine still ran: what it appends
    next goes nowhere, without an error."""
    journal = Journals(tmp_path).open("uid-1")
    assert journal is not None
    Journals(tmp_path).discard("uid-1")
    journal.append({"id": "late", "output": 1})
    journal.flush()
    journal.close()
    assert not (tmp_path / "runs" / "uid-1").exists()


async def test_a_made_up_key_taken_over_by_a_later_real_id_survives_a_crash(
    tmp_path: Path,
) -> None:
    """An HTTP-like source gives an item without an id (filed under a made-up key), then a real
    item whose id is that key: the made-up record moves aside. After a crash and a restart the
    run still holds both, each under its own key, and never mistakes one for the other."""

    class Given(Feed):
        def __init__(self, values: list[dict[str, Any]]) -> None:
            super().__init__(0)
            self._values = iter(values)

    # The pair comes after the first status write, so only the journal can carry the move.
    early = [{"id": f"e{n}", "n": n} for n in range(2, 40)]
    late = [{"id": f"i{n}", "n": n} for n in range(40, 80)]
    values = [*early, {"n": 0}, {"id": "[38]", "n": 1}, *late]
    config = run_config("run", pool="workers", item_id="id", cap=4, failures="Report")
    clock = LoopClock()
    sink = FakeSink()
    journal = KilledJournal(tmp_path / "run")
    crashed = asyncio.Event()
    invoker = FakeInvoker(clock, quick)
    feed = Given(values)
    invoker.on_call = crash_after(50, sink, journal, invoker, crashed)
    first = RunEngine(
        config,
        source=feed,
        dispatcher=Dispatching(FakeDispatcher(clock, {"workers": 4}), invoker),
        sink=sink,
        clock=clock,
        journal=journal,
    )
    await run_until_crash(first, crashed)
    moves = [entry for entry in journal.load() if "moved" in entry]
    assert moves == [{"id": "[38][2]", "moved": "[38]"}], "the journal alone holds the move"
    sink.frozen = False
    invoker.on_call, invoker.halted = None, False
    second = RunEngine(
        config,
        source=feed,
        dispatcher=Dispatching(FakeDispatcher(clock, {"workers": 4}), invoker),
        sink=sink,
        clock=clock,
        status=stored(copy.deepcopy(sink.status)),
        configmaps=copy.deepcopy(sink.configmaps),
        journal=FileJournal(tmp_path / "run"),
    )
    await second.run()
    records = list(iter_results(sink.status, sink.result_configmaps()))
    keys = [record["id"] for record in records]
    assert len(keys) == len(set(keys))
    assert sink.status["items"]["[38]"] == {"n": 1}
    missing = [key for key, f in sink.status["failures"].items() if f["reason"] == "MissingId"]
    assert missing == ["[38][2]"]
    assert sink.status["failed"] == 1
    assert sink.status["succeeded"] == len(keys) - 1
