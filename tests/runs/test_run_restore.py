"""A run restored from a status in the shape the operator writes today: what the status recorded
is never run again, what it names in flight or awaiting a retry runs again with the next
attempt, and what it never saw runs for the first time.

The status below is kept literally, as a run of today's operator left it when that operator
was killed, so that a change to how status is read (its model, its field names) must still
read it: objects in a cluster outlive the operator that wrote them.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from runfakes import (
    Dispatching,
    FakeDispatcher,
    FakeInvoker,
    FakeSink,
    echo,
    run_config,
    stored,
)

from agentpool.runs.engine import RunEngine
from agentpool.runs.sources import inline_source
from clocks import LoopClock

#: Calls, back-offs and status intervals pass on looptime's fake loop time.
pytestmark = pytest.mark.looptime

#: Six items a to f: a and b done, c failed, d in flight and e awaiting its second attempt when
#: the operator was killed; f not yet taken from the source.
WRITTEN_TODAY: dict[str, Any] = {
    "phase": "Running",
    "total": 5,
    "active": 1,
    "retrying": 1,
    "succeeded": 2,
    "failed": 1,
    "retries": 1,
    "startTime": "2026-12-04T03:00:00Z",
    "items": {"a": {"echo": {"id": "a"}}, "b": {"echo": {"id": "b"}}},
    "failures": {
        "c": {"reason": "HandlerError", "message": "no", "attempts": 1, "agent": "workers-x1"}
    },
    "inFlight": {"d": 1},
    "awaitingRetry": {"e": 1},
    "conditions": [
        {
            "type": "Complete",
            "status": "False",
            "reason": "Running",
            "message": "items in flight",
            "lastTransitionTime": "2026-12-04T03:00:00Z",
            "observedGeneration": 1,
        }
    ],
    "observedGeneration": 1,
}

ITEMS = [{"id": key} for key in "abcdef"]


async def test_a_status_written_today_is_restored_item_for_item() -> None:
    clock = LoopClock()
    invoker = FakeInvoker(clock, echo())
    sink = FakeSink()
    sink.status = copy.deepcopy(WRITTEN_TODAY)
    config = run_config("run", pool="workers", item_id="id", max_attempts=3, failures="Report")
    engine = RunEngine(
        config,
        source=inline_source(ITEMS),
        dispatcher=Dispatching(FakeDispatcher(clock, {"workers": 2}), invoker),
        sink=sink,
        clock=clock,
        status=stored(copy.deepcopy(WRITTEN_TODAY)),
    )
    end = await engine.run()
    assert (end.phase, end.result) == ("Succeeded", "Drained")
    assert sorted((key, attempt) for key, attempt, _ in invoker.calls) == [
        ("d", 2),
        ("e", 2),
        ("f", 1),
    ]
    status = sink.status
    assert status["items"] == {key: {"echo": {"id": key}} for key in "abdef"}
    assert status["failures"] == WRITTEN_TODAY["failures"]
    assert (status["total"], status["succeeded"], status["failed"]) == (6, 5, 1)
    assert (status["active"], status["retrying"]) == (0, 0)
    assert not status.get("inFlight")
    assert not status.get("awaitingRetry")
