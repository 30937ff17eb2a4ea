"""The run's lanes: at most cap items in flight, each lane going on to the next item, and a
checkout that finds no agent while no lane holds one deadlocks the run.

Tests of :class:`Lanes` over the fake broker and agents, with the feed and ledger it drives.
"""

from __future__ import annotations

from typing import Any

import pytest
from runfakes import (
    Dispatching,
    FakeDispatcher,
    FakeInvoker,
    echo,
    run_config,
    run_parts,
)

from agentpool.runs.calls import AgentCalls
from agentpool.runs.feed import Feed
from agentpool.runs.intake import Intake
from agentpool.runs.lanes import Lanes
from agentpool.runs.sources import inline_source
from agentpool.runs.status import RunLedger
from clocks import LoopClock

#: Calls, back-offs and status intervals pass on looptime's fake loop time.
pytestmark = pytest.mark.looptime


def lanes(
    clock: LoopClock, dispatcher: FakeDispatcher, items: list[Any], *, cap: int
) -> tuple[Lanes, RunLedger, Feed]:
    config = run_config("run", pool="workers", cap=cap, checkout_timeout_seconds=1.0)
    ledger = RunLedger(run="run", replayable=True)
    shared, report, retries = run_parts(config, ledger, clock)
    intake = Intake(inline_source(items), shared)
    feed = Feed(config, shared, intake=intake, retries=retries, report=report, rerun_limit=None)
    invoker = FakeInvoker(clock, echo())
    made = Lanes(
        cap,
        shared,
        feed=feed,
        calls=AgentCalls(
            config, dispatcher=Dispatching(dispatcher, invoker), waiting=shared.waiting
        ),
        retries=retries,
        intake=intake,
        may_start=lambda: True,
    )
    return made, ledger, feed


async def test_lanes_carry_every_item_at_most_cap_at_a_time() -> None:
    """Two lanes carry five items: each lane goes on to the next item by itself."""
    clock = LoopClock()
    dispatcher = FakeDispatcher(clock, {"workers": 2})
    running_lanes, ledger, feed = lanes(clock, dispatcher, [{"n": n} for n in range(5)], cap=2)
    await running_lanes.fill(clock.now())
    assert len(running_lanes) == 2
    deadline = clock.now() + 60
    while ledger.succeeded < 5:
        assert clock.now() < deadline, "the items did not finish"
        await clock.sleep(0.1)
        running_lanes.reap()
    await running_lanes.stop()
    assert dispatcher.most_held == 2
    assert feed.drained
    assert running_lanes.deadlock is None


async def test_no_agent_while_no_slot_holds_one_is_a_deadlock() -> None:
    """A pool with no agent at all: the checkout times out with nothing running, the item goes
    back to the front, and the run is deadlocked."""
    clock = LoopClock()
    dispatcher = FakeDispatcher(clock, {"workers": 0})
    stuck, ledger, feed = lanes(clock, dispatcher, [{"n": 0}], cap=1)
    await stuck.fill(clock.now())
    deadline = clock.now() + 60
    while stuck.deadlock is None:
        assert clock.now() < deadline, "no deadlock was found"
        await clock.sleep(0.5)
    await stuck.stop()
    assert stuck.deadlock is not None
    assert "exhausted" in stuck.deadlock
    assert ledger.attempts.in_flight == {}, "the attempt that found no agent does not count"
    assert not feed.drained, "the item waits to start again"
