"""What a PoolRun's status says while it runs: counts that mean what they say, attempts and
retries that agree, and conditions that name what the run waits for."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from runfakes import (
    FakeClock,
    FakeDispatcher,
    FakeInvoker,
    FakeSink,
    Result,
    run_engine,
)

from agentpool.io.journal import FileJournal
from agentpool.runs.config import RunConfig
from agentpool.runs.engine import RunEngine
from agentpool.runs.sources import inline_source


class RecordingSink(FakeSink):
    """A sink that keeps the status as it stood after every write."""

    def __init__(self) -> None:
        super().__init__()
        self.history: list[dict[str, Any]] = []

    async def write(self, patch: dict[str, Any]) -> None:
        await super().write(patch)
        if not self.frozen:
            self.history.append(copy.deepcopy(self.status))


def fail_first_attempt(envelope: dict[str, Any], agent: str) -> tuple[float, Result]:
    """Every item fails its first attempt and succeeds on the next."""
    if envelope["attempt"] == 1:
        return 0.1, Result(ok=False, reason="HandlerError", message="not this time")
    return 0.1, Result(ok=True, output=envelope["attempt"])


@pytest.mark.parametrize("journaled", [False, True], ids=["no-state-dir", "journal"])
async def test_items_waiting_for_a_retry_are_not_active(tmp_path: Path, journaled: bool) -> None:
    """Ten items at cap 2 each fail once and wait 30 s for their retry: status never counts
    more than cap items active or in flight, counts those waiting in `retrying` instead, and
    the waiting ones do not keep the rest from starting."""
    clock = FakeClock()
    sink = RecordingSink()
    engine = RunEngine(
        RunConfig(name="run", pool="workers", cap=2, max_attempts=2, backoff_seconds=30.0),
        source=inline_source(list(range(10))),
        dispatcher=FakeDispatcher(clock, {"workers": 2}),
        invoker=FakeInvoker(clock, fail_first_attempt),
        sink=sink,
        clock=clock,
        journal=FileJournal(tmp_path / "run") if journaled else None,
    )
    outcome = await run_engine(engine, clock)
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
