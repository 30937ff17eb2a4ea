"""A run's progress survives an operator crash, costs few status writes, and scales in size."""

from __future__ import annotations

import asyncio
import copy
import itertools
import json

import pytest
from runfakes import (
    Behaviour,
    Dispatching,
    FakeDispatcher,
    FakeInvoker,
    FakeSink,
    Result,
    echo,
    run_config,
    run_until_crash,
    stored,
)

from agentpool.api import RawRunStatus
from agentpool.runs.engine import RunEngine
from agentpool.runs.sources import inline_source
from agentpool.runs.status import RunLedger
from agentpool.settings import RunSettings
from agentpool.wire.envelopes import EnvelopeBody
from agentpool.wire.results import iter_results
from clocks import LoopClock

#: Calls, back-offs and status intervals pass on looptime's fake loop time.
pytestmark = pytest.mark.looptime


def varied(envelope: EnvelopeBody, agent: str) -> tuple[float, Result]:
    """Calls of 0.2 to 0.9 s, different per item, each output naming its item."""
    n = envelope["item"]["n"]
    return 0.2 + (n * 7 % 8) / 10, Result(ok=True, output={"n": n, "by": "agent"})


def slow(envelope: EnvelopeBody, agent: str) -> tuple[float, Result]:
    """Calls of 1.5 to 3.25 s, so items are in flight whenever status is written."""
    n = envelope["item"]["n"]
    return 1.5 + (n * 5 % 8) / 4, Result(ok=True, output={"n": n})


@pytest.mark.parametrize(
    ("behaviour", "cap", "count"), [(varied, 20, 500), (slow, 6, 80)], ids=["short", "long"]
)
async def test_a_crashed_run_resumes_without_running_recorded_items_again(
    behaviour: Behaviour, cap: int, count: int
) -> None:
    """After a crash, recorded items never run again; those in flight run again with attempt + 1,
    at most cap of them; in the end every item is recorded once."""
    items = [{"id": f"i{n}", "n": n} for n in range(count)]
    config = run_config("run", pool="workers", item_id="id", cap=cap)
    clock = LoopClock()
    sink = FakeSink()
    crashed = asyncio.Event()
    invoker = FakeInvoker(clock, behaviour)

    def crash_at(calls: int) -> None:
        # Crash half-way, just after a write that left items in flight if there is one.
        late = calls >= count * 3 // 4
        if calls >= count // 2 and not crashed.is_set() and (sink.status.get("inFlight") or late):
            # From here on nothing the first operator does reaches the API server.
            sink.frozen = True
            crashed.set()

    invoker.on_call = crash_at
    first = RunEngine(
        config,
        source=inline_source(items),
        dispatcher=Dispatching(FakeDispatcher(clock, {"workers": cap}), invoker),
        sink=sink,
        clock=clock,
    )
    await run_until_crash(first, crashed)

    written = copy.deepcopy(sink.status)
    recorded_at_crash = {record["id"] for record in iter_results(written, [])}
    in_flight_at_crash = dict(written.get("inFlight", {}))
    assert recorded_at_crash, "the crash came after some progress was written"
    assert len(in_flight_at_crash) <= cap
    runs_before = dict(invoker.runs)

    sink.frozen = False
    invoker.on_call = None
    second_calls = len(invoker.calls)
    second = RunEngine(
        config,
        source=inline_source(items),
        dispatcher=Dispatching(FakeDispatcher(clock, {"workers": cap}), invoker),
        sink=sink,
        clock=clock,
        status=stored(written),
        configmaps=copy.deepcopy(sink.configmaps),
    )
    outcome = await second.run()

    assert (outcome.phase, outcome.result) == ("Succeeded", "Drained")
    assert sink.status["succeeded"] == count
    assert set(sink.status["items"]) == {item["id"] for item in items}
    if behaviour is slow:
        assert in_flight_at_crash, "long calls are in flight when status is written"
    rerun = {key for key, count in invoker.runs.items() if count > 1}
    assert not rerun & recorded_at_crash
    assert len(rerun) <= cap
    assert set(in_flight_at_crash) - recorded_at_crash <= rerun | set(runs_before)
    for key, attempt, _ in invoker.calls[second_calls:]:
        if key in in_flight_at_crash:
            assert attempt == in_flight_at_crash[key] + 1
    assert sink.status.get("inFlight", {}) == {}


async def test_500_items_cost_at_most_30_status_writes() -> None:
    """500 items with calls of 0.2 to 0.9 s and cap 20 are written in at most 30 status writes."""
    items = [{"id": f"i{n}", "n": n} for n in range(500)]
    clock = LoopClock()
    sink = FakeSink()
    engine = RunEngine(
        run_config("run", pool="workers", item_id="id", cap=20),
        source=inline_source(items),
        dispatcher=Dispatching(FakeDispatcher(clock, {"workers": 20}), FakeInvoker(clock, varied)),
        sink=sink,
        clock=clock,
    )
    outcome = await engine.run()
    assert outcome.result == "Drained"
    assert sink.status["succeeded"] == 500
    assert sink.writes <= 30, sink.writes


async def test_writes_are_at_least_an_interval_apart() -> None:
    """While dispatch does not wait on a write, no two status writes of a running run are closer
    than the status interval."""
    times: list[float] = []
    clock = LoopClock()

    class TimedSink(FakeSink):
        async def write(self, patch: RawRunStatus) -> None:
            times.append(clock.now())
            await super().write(patch)

    sink = TimedSink()
    config = run_config("run", pool="workers", cap=4, rerun_limit=0)
    engine = RunEngine(
        config,
        source=inline_source(list(range(60))),
        dispatcher=Dispatching(
            FakeDispatcher(clock, {"workers": 4}), FakeInvoker(clock, echo(0.3))
        ),
        sink=sink,
        clock=clock,
        configmaps={},
        settings=RunSettings(status_interval_seconds=2.0),
    )
    await engine.run()
    # The last write, at the end, is not held back.
    gaps = [later - earlier for earlier, later in itertools.pairwise(times[:-1])]
    assert gaps
    assert min(gaps) >= 2.0 - 1e-6


async def test_short_items_held_by_the_rerun_limit_do_not_wait_for_the_interval() -> None:
    """When the re-run limit holds dispatch and nothing runs, status is written after the short
    held gap, not the whole interval: 200 items of 0.05 s at cap 8 take about 3 s instead of
    25, with no more writes than one per cap items (plus the first and last), and never more
    than cap items unwritten."""
    times: list[float] = []
    unwritten: list[int] = []
    clock = LoopClock()

    class TimedSink(FakeSink):
        async def write(self, patch: RawRunStatus) -> None:
            times.append(clock.now())
            await super().write(patch)

    sink = TimedSink()
    invoker = FakeInvoker(clock, echo(0.05))
    engine = RunEngine(
        run_config("run", pool="workers", cap=8),
        source=inline_source(list(range(200))),
        dispatcher=Dispatching(FakeDispatcher(clock, {"workers": 8}), invoker),
        sink=sink,
        clock=clock,
        settings=RunSettings(held_write_gap_seconds=0.1),
    )
    # What a crash now would run again: items called whose output status does not hold yet.
    invoker.on_call = lambda calls: unwritten.append(
        len(set(invoker.runs) - set(sink.status.get("items", {})))
    )
    started = clock.now()
    outcome = await engine.run()
    assert outcome.result == "Drained"
    assert sink.status["succeeded"] == 200
    assert clock.now() - started < 4.0
    assert sink.writes <= 200 // 8 + 2
    assert max(unwritten) <= 8
    # The last write, at the end, is not held back.
    gaps = [later - earlier for earlier, later in itertools.pairwise(times[:-1])]
    assert min(gaps) >= 0.1 - 1e-6


async def test_20000_items_with_2_kib_outputs_keep_status_small() -> None:
    """20,000 outputs of 2 KiB keep the status under 256 KiB; results come back, all 20,000."""
    items = [{"id": f"item-{n:05d}", "n": n} for n in range(20_000)]

    def big(envelope: EnvelopeBody, agent: str) -> tuple[float, Result]:
        n = envelope["item"]["n"]
        return 0.5, Result(ok=True, output={"n": n, "text": f"{n:05d}" * 400})

    clock = LoopClock()
    sink = FakeSink()
    engine = RunEngine(
        run_config("big", pool="workers", item_id="id", cap=200),
        source=inline_source(items),
        dispatcher=Dispatching(FakeDispatcher(clock, {"workers": 200}), FakeInvoker(clock, big)),
        sink=sink,
        clock=clock,
    )
    outcome = await engine.run()
    assert outcome.result == "Drained"
    assert sink.largest_status < 256 * 1024
    assert sink.status["succeeded"] == 20_000
    refs = sink.status["resultRefs"]
    assert refs
    assert all(ref["name"].startswith("big-results-") for ref in refs)
    assert sum(ref["outputs"] for ref in refs) + len(sink.status["items"]) == 20_000
    for data in sink.configmaps.values():
        assert sum(len(value.encode()) for value in data.values()) < 1024 * 1024
    records = list(iter_results(sink.status, sink.result_configmaps()))
    assert len(records) == 20_000
    assert {record["id"] for record in records} == {item["id"] for item in items}
    sample = next(record for record in records if record["id"] == "item-12345")
    assert sample["output"]["text"] == "12345" * 400


async def test_an_output_over_4_kib_goes_to_a_configmap() -> None:
    """A single output over 4 KiB is kept in a result ConfigMap, not in status."""

    def sized(envelope: EnvelopeBody, agent: str) -> tuple[float, Result]:
        return 0.1, Result(ok=True, output="x" * envelope["item"]["size"])

    clock = LoopClock()
    sink = FakeSink()
    engine = RunEngine(
        run_config("run", pool="workers", item_id="id", cap=2),
        source=inline_source([{"id": "small", "size": 10}, {"id": "large", "size": 5000}]),
        dispatcher=Dispatching(FakeDispatcher(clock, {"workers": 2}), FakeInvoker(clock, sized)),
        sink=sink,
        clock=clock,
    )
    await engine.run()
    assert set(sink.status["items"]) == {"small"}
    assert sink.status["resultRefs"] == [{"name": "run-results-0", "outputs": 1, "failures": 0}]
    records = {r["id"]: r for r in iter_results(sink.status, sink.result_configmaps())}
    assert records["large"]["output"] == "x" * 5000
    assert len(json.dumps(sink.status)) < 4096


async def test_items_that_finish_during_a_status_write_are_written_later() -> None:
    """An item that finishes while a status write is on its way is written by a later one: the
    run drains rather than waiting forever with results no write will ever carry."""
    clock = LoopClock()

    class SlowSink(FakeSink):
        async def write(self, patch: RawRunStatus) -> None:
            await clock.sleep(0.2)  # a slow API round trip, during which every item finishes
            await super().write(patch)

    sink = SlowSink()

    engine = RunEngine(
        run_config("run", pool="workers", cap=4),
        source=inline_source(list(range(200))),
        dispatcher=Dispatching(
            FakeDispatcher(clock, {"workers": 4}), FakeInvoker(clock, echo(0.05))
        ),
        sink=sink,
        clock=clock,
        settings=RunSettings(held_write_gap_seconds=0.1),
    )
    # On loop time: the run takes 12.7 s of it; a run that waits forever meets this at once.
    async with asyncio.timeout(60):
        outcome = await engine.run()
    assert outcome.result == "Drained"
    assert sink.status["succeeded"] == 200


async def test_a_cast_runs_delivered_items_are_recorded_so_a_restart_skips_them() -> None:
    """A Cast hand-over has no output (null): each delivered item is still recorded, read back
    by `agentpool results`, so a restarted operator never delivers it again."""

    def cast(envelope: EnvelopeBody, agent: str) -> tuple[float, Result]:
        return 0.1, Result(ok=True, output=None)

    clock = LoopClock()
    sink = FakeSink()
    engine = RunEngine(
        run_config("run", pool="workers", cap=2, mode="Cast"),
        source=inline_source([{"n": n} for n in range(3)]),
        dispatcher=Dispatching(FakeDispatcher(clock, {"workers": 2}), FakeInvoker(clock, cast)),
        sink=sink,
        clock=clock,
    )
    await engine.run()
    records = list(iter_results(sink.status, sink.result_configmaps()))
    assert records == [{"id": str(n), "output": None} for n in range(3)]
    restored = RunLedger.restore(
        "run", replayable=True, status=stored(sink.status), configmaps=sink.configmaps
    )
    assert restored.recorded == {"0", "1", "2"}
