"""What a PoolRun's status says while it runs: counts that mean what they say, attempts and
retries that agree, and conditions that name what the run waits for."""

from __future__ import annotations

import asyncio
import copy
import re
from collections import defaultdict
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
    echo,
    run_config,
    run_until_crash,
    stored,
)

from agentpool.api import RawRunStatus
from agentpool.io.journal import FileJournal
from agentpool.runs.engine import RunEngine
from agentpool.runs.journaling import decode_entry, replay
from agentpool.runs.sources import DONE, Pulled, Signal, inline_source
from agentpool.runs.waits import Waits, next_step
from agentpool.wire.envelopes import EnvelopeBody
from clocks import LoopClock

#: Calls, back-offs and status intervals pass on looptime's fake loop time.
pytestmark = pytest.mark.looptime


class RecordingSink(FakeSink):
    """A sink that keeps the status as it stood after every write."""

    def __init__(self) -> None:
        super().__init__()
        self.history: list[dict[str, Any]] = []

    async def write(self, patch: RawRunStatus) -> None:
        await super().write(patch)
        if not self.frozen:
            self.history.append(copy.deepcopy(self.status))


def fail_first_attempt(envelope: EnvelopeBody, agent: str) -> tuple[float, Result]:
    """Every item fails its first attempt and succeeds on the next."""
    if envelope["attempt"] == 1:
        return 0.1, Result(ok=False, reason="HandlerError", message="not this time")
    return 0.1, Result(ok=True, output=envelope["attempt"])


@pytest.mark.parametrize("journaled", [False, True], ids=["no-state-dir", "journal"])
async def test_items_waiting_for_a_retry_are_not_active(tmp_path: Path, journaled: bool) -> None:
    """Ten items at cap 2 each fail once and wait 30 s for their retry: status never counts
    more than cap items active or in flight, counts those waiting in `retrying` instead, and
    the waiting ones do not keep the rest from starting."""
    clock = LoopClock()
    sink = RecordingSink()
    engine = RunEngine(
        run_config("run", pool="workers", cap=2, max_attempts=2, backoff_seconds=30.0),
        source=inline_source(list(range(10))),
        dispatcher=Dispatching(
            FakeDispatcher(clock, {"workers": 2}), FakeInvoker(clock, fail_first_attempt)
        ),
        sink=sink,
        clock=clock,
        journal=FileJournal(tmp_path / "run") if journaled else None,
    )
    outcome = await engine.run()
    assert (outcome.phase, outcome.result) == ("Succeeded", "Drained")
    for status in sink.history:
        assert status.get("active", 0) <= 2, status
        assert len(status.get("inFlight", {})) <= 2, status
    waiting = max(sink.history, key=lambda status: status.get("retrying", 0))
    assert (waiting["retrying"], waiting["active"]) == (10, 0)
    final = sink.history[-1]
    assert (final["succeeded"], final["retries"], final["retrying"], final["active"]) == (
        10,
        10,
        0,
        0,
    )


def flaky(envelope: EnvelopeBody, agent: str) -> tuple[float, Result]:
    """Calls of 0.2 to 0.9 s; every fifth item fails its first two attempts."""
    n = envelope["item"]["n"]
    if n % 5 == 0 and envelope["attempt"] <= 2:
        return 0.3, Result(ok=False, reason="HandlerError", message="not yet")
    return 0.2 + (n * 7 % 8) / 10, Result(ok=True, output={"n": n})


@pytest.mark.parametrize("journaled", [False, True], ids=["no-state-dir", "journal"])
async def test_attempts_and_retries_agree_across_a_crash(tmp_path: Path, journaled: bool) -> None:
    """An operator killed in the middle of a run that retries failed items, then started again:
    an item that reached an agent before the kill and runs again gets a higher attempt than any
    it had, with a state directory or without, and `retries` counts every attempt past an
    item's first, as the agents were given them, in both lives."""
    items = [{"id": f"i{n}", "n": n} for n in range(120)]
    config = run_config(
        "run", pool="workers", item_id="id", cap=6, max_attempts=3, backoff_seconds=1
    )
    clock = LoopClock()
    sink = FakeSink()
    crashed = asyncio.Event()
    invoker = FakeInvoker(clock, flaky)
    journal = KilledJournal(tmp_path / "run") if journaled else None
    invoker.on_call = crash_after(70, sink, journal, invoker, crashed)
    first = RunEngine(
        config,
        source=inline_source(items),
        dispatcher=Dispatching(FakeDispatcher(clock, {"workers": 6}), invoker),
        sink=sink,
        clock=clock,
        journal=journal,
    )
    await run_until_crash(first, crashed)
    before = defaultdict(list)
    for key, attempt, _ in invoker.calls:
        before[key].append(attempt)

    sink.frozen = False
    invoker.on_call, invoker.halted = None, False
    second_calls = len(invoker.calls)
    second = RunEngine(
        config,
        source=inline_source(items),
        dispatcher=Dispatching(FakeDispatcher(clock, {"workers": 6}), invoker),
        sink=sink,
        clock=clock,
        status=stored(copy.deepcopy(sink.status)),
        configmaps=copy.deepcopy(sink.configmaps),
        journal=FileJournal(tmp_path / "run") if journaled else None,
    )
    outcome = await second.run()

    assert (outcome.phase, outcome.result) == ("Succeeded", "Drained")
    assert sink.status["succeeded"] == 120
    after = defaultdict(list)
    for key, attempt, _ in invoker.calls[second_calls:]:
        after[key].append(attempt)
    again = set(before) & set(after)
    assert again, "items that had reached an agent ran again after the restart"
    for key in again:
        assert min(after[key]) > max(before[key]), (key, before[key], after[key])
    highest: dict[str, int] = {}
    for key, attempt, _ in invoker.calls:
        highest[key] = max(highest.get(key, 0), attempt)
    assert sink.status["retries"] == sum(attempt - 1 for attempt in highest.values())


async def test_a_retry_named_in_status_before_a_crash_counts_once_it_runs_again() -> None:
    """Without a state directory an attempt is written in flight before it starts. Killed just
    after that write, before the retry reached its agent, the run goes on with the next attempt
    after the restart: `retries` then counts both attempts past the first, as the attempt the
    agent was given says."""
    clock = LoopClock()
    crashed = asyncio.Event()
    invoker = FakeInvoker(clock, fail_first_attempt)

    class CrashingSink(FakeSink):
        async def write(self, patch: RawRunStatus) -> None:
            await super().write(patch)
            if (patch.get("inFlight") or {}).get("0") == 2 and not crashed.is_set():
                self.frozen, invoker.halted = True, True
                crashed.set()

    sink = CrashingSink()
    config = run_config("run", pool="workers", max_attempts=3, backoff_seconds=1.0)
    first = RunEngine(
        config,
        source=inline_source(["only"]),
        dispatcher=Dispatching(FakeDispatcher(clock, {"workers": 1}), invoker),
        sink=sink,
        clock=clock,
    )
    await run_until_crash(first, crashed)
    sink.frozen, invoker.halted = False, False
    second = RunEngine(
        config,
        source=inline_source(["only"]),
        dispatcher=Dispatching(FakeDispatcher(clock, {"workers": 1}), invoker),
        sink=sink,
        clock=clock,
        status=stored(copy.deepcopy(sink.status)),
    )
    outcome = await second.run()
    assert outcome.result == "Drained"
    assert [attempt for _, attempt, _ in invoker.calls] == [1, 3]
    assert (sink.status["items"], sink.status["retries"]) == ({"0": 3}, 2)


def test_a_journal_read_back_after_a_restart_counts_each_retry_once() -> None:
    """The journal may still hold entries the last status write already counted (the operator
    died between the write and releasing them): each attempt past an item's first counts once,
    an attempt that found no agent not at all, and each item resumes after the last attempt it
    may have made."""
    status = {
        "retries": 3,
        "inFlight": {"a": 2},
        "awaitingRetry": {"b": 1},
        "items": {"done": 1},
    }
    journal: list[dict[str, Any]] = [
        {"id": "a", "attempt": 2},  # before the write, which counted it
        {"id": "b", "attempt": 2},  # after it
        {"id": "b", "unstarted": True},  # ... and it found no agent
        {"id": "c", "attempt": 1},
        {"id": "c", "unstarted": True},
        {"id": "d", "attempt": 1},
        {"id": "e", "attempt": 1},
        {"id": "e", "output": "e"},
    ]
    ledger = replay(
        [decode_entry(raw) for raw in journal],
        run="run",
        replayable=True,
        status=stored(status),
    )
    assert ledger.attempts.retries == 3
    assert ledger.attempts.resumed == {"a": 2, "b": 1, "d": 1}
    assert [ledger.attempts.next_attempt(key) for key in "abcd"] == [3, 2, 1, 2]


class TimedSink(FakeSink):
    """A sink that keeps, for every write, the time and the status as it stood after it."""

    def __init__(self, clock: LoopClock) -> None:
        super().__init__()
        self.clock = clock
        self.history: list[tuple[float, dict[str, Any]]] = []

    async def write(self, patch: RawRunStatus) -> None:
        await super().write(patch)
        if not self.frozen:
            self.history.append((self.clock.now(), copy.deepcopy(self.status)))


def waiting_of(status: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions", []) if c["type"] == "Waiting"), None)


async def test_a_missing_pool_is_named_at_once_and_the_wait_ends_when_it_comes() -> None:
    """A run whose pool does not exist says so within a status interval, as condition Waiting
    (reason PoolNotFound) and in its message, naming the pool and how long it has waited; once
    the pool is created the condition turns False, the message goes, and the run drains."""
    clock = LoopClock()
    sink = TimedSink(clock)
    dispatcher = FakeDispatcher(clock, {})
    engine = RunEngine(
        run_config("run", pool="workers", cap=2, checkout_timeout_seconds=60.0),
        source=inline_source(list(range(4))),
        dispatcher=Dispatching(dispatcher, FakeInvoker(clock, echo())),
        sink=sink,
        clock=clock,
    )
    start = clock.now()

    async def create_pool_later() -> None:
        await clock.sleep(20.0)
        dispatcher.add_pool("workers", 2)

    creator = asyncio.ensure_future(create_pool_later())
    outcome = await engine.run()
    await creator
    assert (outcome.phase, outcome.result) == ("Succeeded", "Drained")
    waits = [
        (at, status)
        for at, status in sink.history
        if (waiting_of(status) or {}).get("status") == "True"
    ]
    assert waits, "status said the run waits for its pool"
    first_at, first = waits[0]
    assert first_at - start <= 1.0 + 1e-6
    assert first["phase"] == "Running"
    condition = waiting_of(first)
    assert condition is not None
    assert condition["reason"] == "PoolNotFound"
    assert 'pool "workers" not found' in condition["message"]
    assert re.search(r"\(waited \ds so far\)$", condition["message"]), condition["message"]
    assert first["message"] == condition["message"]
    later = waits[-1][1]
    assert "waited 16s so far" in later["message"]
    assert len(waits) <= 8, [status["message"] for _, status in waits]
    after = [status for at, status in sink.history if at >= start + 20.0]
    running_again = next(status for status in after if waiting_of(status)["status"] == "False")
    assert "message" not in running_again
    final = sink.history[-1][1]
    assert waiting_of(final)["status"] == "False"
    assert final["message"] == "4 of 4 items succeeded"


class HangingSource:
    """A source service that takes ``hang`` seconds to answer its first request, then hands out
    ``count`` items and says it is done."""

    replayable = False
    total = None
    name = "http source http://source.test/next"

    def __init__(self, clock: LoopClock, *, hang: float, count: int) -> None:
        self._clock = clock
        self._hang = hang
        self._left = count
        self.requests = 0

    async def next(self, active: Any, room: int = 1) -> Pulled | Signal:
        self.requests += 1
        if self.requests == 1:
            await self._clock.sleep(self._hang)
        if self._left == 0:
            return DONE
        self._left -= 1
        return Pulled({"n": self._left})

    async def close(self) -> None:
        return None


async def test_a_source_that_does_not_answer_is_named_while_the_run_waits() -> None:
    """A source service that takes 40 s to answer: within a status interval the run is Running
    with condition Waiting (reason SourcePending) and a message naming the source's URL and how
    long it has waited, written again as the wait grows; once items come the wait is over."""
    clock = LoopClock()
    sink = TimedSink(clock)
    engine = RunEngine(
        run_config("run", pool="workers", cap=2),
        source=HangingSource(clock, hang=40.0, count=3),
        dispatcher=Dispatching(FakeDispatcher(clock, {"workers": 2}), FakeInvoker(clock, echo())),
        sink=sink,
        clock=clock,
    )
    start = clock.now()
    outcome = await engine.run()
    assert (outcome.phase, outcome.result) == ("Succeeded", "Drained")
    waits = [(at, s) for at, s in sink.history if (waiting_of(s) or {}).get("status") == "True"]
    assert waits, "status said the run waits for its source"
    first_at, first = waits[0]
    assert first_at - start <= 2.0 + 1e-6
    assert first["phase"] == "Running"
    condition = waiting_of(first)
    assert condition is not None
    assert condition["reason"] == "SourcePending"
    assert "http source http://source.test/next has not answered yet" in condition["message"]
    assert "waited 32s so far" in waits[-1][1]["message"]
    assert len(waits) <= 8, [status["message"] for _, status in waits]
    final = sink.history[-1][1]
    assert final["succeeded"] == 3
    assert waiting_of(final)["status"] == "False"


def test_a_wait_says_how_long_and_is_written_again_as_it_grows() -> None:
    """The Waiting condition names the longest wait first, says for how long, comes into view
    only after its `after`, and reads differently at 1, 2, 4 ... 32 s, then every minute."""
    waits = Waits()
    waits.begin("source", "SourcePending", "source has no item ready yet", now=100.0, after=1.0)
    assert waits.condition(100.5) is None
    assert waits.next_change(100.5) == 101.0
    waits.begin("pool/p", "PoolNotFound", 'pool "p" not found', now=100.5)
    assert waits.condition(100.5) == (
        "PoolNotFound",
        'pool "p" not found (waited 0s so far)',
        100.5,
    )
    reason, message, since = waits.condition(250.0) or ("", "", 0.0)
    assert (reason, since) == ("SourcePending", 100.0)
    assert message == (
        "source has no item ready yet (waited 2m30s so far); "
        'pool "p" not found (waited 2m29s so far)'
    )
    assert [next_step(waited) for waited in (0.0, 1.0, 3.9, 31.0, 32.0, 61.0, 150.0)] == [
        1.0, 2.0, 4.0, 32.0, 60.0, 120.0, 180.0,
    ]  # fmt: skip
    assert waits.end("source")
    assert not waits.end("source")
    assert waits.condition(250.0) == (
        "PoolNotFound",
        'pool "p" not found (waited 2m29s so far)',
        100.5,
    )
