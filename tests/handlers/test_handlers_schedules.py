"""The pool's loop keeps the sizes its schedules and its headroom put in force, by the
runtime's clock: it grows when a window opens (waking at the window's start, not a pass later),
reports the sizes and the open windows in status, marks a pool whose schedule cannot be read
InvalidSpec, and with headroom Auto moves minIdle after its own advice at the stated rate."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from datetime import UTC, datetime
from typing import Any

import kopf
import pytest
from kopf._cogs.aiokits import aioenums
from leasefakes import kopf_context
from poolfakes import PodsKube, pool_handle, runtime_of

from agentpool.api import SpecError
from agentpool.handlers import pools
from agentpool.handlers.poolstatus import report_invalid_spec
from agentpool.handlers.runtime import PoolHandle, Runtime
from agentpool.pool import DemandSample
from agentpool.settings import PoolSettings
from clocks import EPOCH, LoopClock

# 09:00 UTC on 4 December 2026 and a window from 09:00 to 09:30 every day.
NINE = datetime(2026, 12, 4, 9, tzinfo=UTC).timestamp()
WINDOW = {"name": "morning", "start": "0 9 * * *", "durationSeconds": 1800, "minSize": 3}


def pool_body(*schedules: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "agentpool.dev/v1alpha1",
        "kind": "AgentPool",
        "metadata": {"name": "p", "namespace": "ns", "uid": "pool-uid", "generation": 1},
        "spec": {"image": "agent:1", "minSize": 1, "schedules": list(schedules)},
    }


class FixedClock:
    """Wall time where the test puts it."""

    def __init__(self, now: float) -> None:
        self.at = now

    def now(self) -> float:
        return self.at

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(0)


def served(runtime: Runtime, *, idle_pass_seconds: float = 5.0) -> PoolHandle:
    """Pool ns/p served by ``runtime``, in kopf's handler context (so it can post Events)."""
    kopf_context()
    handle = pool_handle(1)
    handle.secret_checked_at = float("inf")  # no token Secret to look after here
    # Every status written at once: the tests read each pass's.
    handle.settings = dataclasses.replace(
        PoolSettings(), idle_pass_seconds=idle_pass_seconds, status_interval_seconds=0
    )
    runtime.pools.serve(handle)
    return handle


async def test_an_open_window_raises_the_pool_and_status_shows_it() -> None:
    """At 09:10 the morning window is open: the pool wants 3 agents, status says so and names
    the window, and the loop looks again by 09:30, when the window closes."""
    kube = PodsKube()
    runtime = runtime_of(kube)
    runtime.clock = FixedClock(NINE + 600)
    handle = served(runtime, idle_pass_seconds=3600)
    delay = await pools.reconcile(runtime, handle, kopf.Body(pool_body(WINDOW)))
    assert len(kube.created) == 3
    assert kube.status["effectiveMinSize"] == 3
    assert kube.status["effectiveMinIdle"] == 0
    assert kube.status["openSchedules"] == "morning"
    assert delay == pytest.approx(1200)


async def test_a_closed_window_leaves_the_spec_sizes() -> None:
    """At 09:30 the window has closed: minSize is the spec's, and no window is named."""
    kube = PodsKube()
    runtime = runtime_of(kube)
    runtime.clock = FixedClock(NINE + 1800)
    handle = served(runtime)
    await pools.reconcile(runtime, handle, kopf.Body(pool_body(WINDOW)))
    assert len(kube.created) == 1
    assert kube.status["effectiveMinSize"] == 1
    assert kube.status.get("openSchedules") is None


@pytest.mark.looptime
async def test_the_loop_wakes_when_a_window_opens() -> None:
    """Nothing pokes the pool and its idle pass is an hour away, yet it grows the moment a
    window opens ten minutes from now: the loop waits for the window's edge."""
    opens = datetime.fromtimestamp((EPOCH // 60 + 10) * 60, tz=UTC)  # on a whole minute
    window = {**WINDOW, "start": f"{opens.minute} {opens.hour} * * *"}
    kube = PodsKube()
    runtime = runtime_of(kube)
    runtime.clock = LoopClock()
    handle = served(runtime, idle_pass_seconds=3600)
    stopper: aioenums.FlagSetter[kopf.DaemonStoppingReason] = aioenums.FlagSetter()
    stopped = aioenums.AsyncFlagWaiter(stopper)
    loop = asyncio.ensure_future(
        pools.run_passes(runtime, handle, kopf.Body(pool_body(window)), stopped)
    )
    try:
        async with asyncio.timeout(900):
            while len(kube.created) < 3:
                kube.grew.clear()
                await kube.grew.wait()
        assert runtime.clock.now() == pytest.approx(opens.timestamp(), abs=1)
        assert kube.status["openSchedules"] == "morning"
    finally:
        stopper.set(kopf.DaemonStoppingReason.OPERATOR_EXITING)
        handle.wake.set()
        await loop


async def test_a_schedule_that_cannot_be_read_marks_the_pool_invalid() -> None:
    """A cron expression the CRD schema let through (its shape is right) is reported on the
    pool: Ready False, reason InvalidSpec, the message naming the field."""
    kube = PodsKube()
    runtime = runtime_of(kube)
    bad = {**WINDOW, "start": "0 25 * * *"}
    with pytest.raises(SpecError) as caught:
        await pools.reconcile(runtime, served(runtime), kopf.Body(pool_body(bad)))
    await report_invalid_spec(runtime, pool_body(bad), caught.value)
    (ready,) = kube.status["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "InvalidSpec")
    assert "spec.schedules[0].start" in ready["message"]
    assert "Bad hour" in ready["message"]
    assert kube.created == []


async def test_headroom_auto_follows_the_advice_at_its_rate_with_an_event() -> None:
    """Demand peaked at 4 agents over a median of 1: headroom Auto raises minIdle towards 3,
    2 a minute, and says so in an Event with the figures; a minute later it reaches 3."""
    kube = PodsKube()
    runtime = runtime_of(kube)
    clock = FixedClock(NINE)
    runtime.clock = clock
    handle = served(runtime)
    queue = kopf_context()
    now = time.time()
    handle.history = [
        DemandSample(at=now - 30 + i, busy=busy, waiting=0) for i, busy in enumerate([1, 1, 4])
    ]
    body = pool_body()
    body["spec"].update(maxSize=6, headroom={"mode": "Auto", "maxStepPerMinute": 2})
    await pools.reconcile(runtime, handle, kopf.Body(body))
    assert kube.status["effectiveMinIdle"] == 2
    posted = [queue.get_nowait() for _ in range(queue.qsize())]
    (changed,) = [e for e in posted if e.reason == "HeadroomChanged"]
    assert changed.type == "Normal"
    assert changed.message.startswith("minIdle 0 -> 2: advice 3 (peak minus median demand)")
    assert "bounds 0..5" in changed.message
    assert "from 3 demand samples" in changed.message
    clock.at += 30
    await pools.reconcile(runtime, handle, kopf.Body(body))
    assert kube.status["effectiveMinIdle"] == 2  # the rate: 2 a minute
    clock.at += 31
    await pools.reconcile(runtime, handle, kopf.Body(body))
    assert kube.status["effectiveMinIdle"] == 3


async def test_headroom_advise_leaves_min_idle_alone() -> None:
    """The default, Advise: the same demand changes nothing and posts no HeadroomChanged."""
    kube = PodsKube()
    runtime = runtime_of(kube)
    runtime.clock = FixedClock(NINE)
    handle = served(runtime)
    queue = kopf_context()
    now = time.time()
    handle.history = [DemandSample(at=now - 1, busy=4, waiting=0)]
    body = pool_body()
    body["spec"].update(maxSize=6)
    await pools.reconcile(runtime, handle, kopf.Body(body))
    assert kube.status["effectiveMinIdle"] == 0
    posted = [queue.get_nowait() for _ in range(queue.qsize())]
    assert all(e.reason != "HeadroomChanged" for e in posted)


async def test_headroom_auto_keeps_its_min_idle_over_an_operator_restart() -> None:
    """A restarted operator has no demand history and no memory of its own: headroom Auto takes
    the minIdle in force from the pool's status, so the warm agents stay, rather than falling to
    spec.minIdle at once; the first advice after the restart (nothing seen yet: 0) waits out the
    scale-down stabilization window before it lowers anything."""
    kube = PodsKube()
    runtime = runtime_of(kube)
    clock = FixedClock(NINE)
    runtime.clock = clock
    handle = served(runtime)
    kopf_context()
    body = pool_body()
    body["spec"].update(maxSize=6, headroom={"mode": "Auto", "maxStepPerMinute": 2})
    body["status"] = {"effectiveMinIdle": 3, "effectiveMinSize": 1}
    handle.history = [DemandSample(at=time.time(), busy=0, waiting=0)]
    await pools.reconcile(runtime, handle, kopf.Body(body))
    assert kube.status["effectiveMinIdle"] == 3
    clock.at += 299
    await pools.reconcile(runtime, handle, kopf.Body(body))
    assert kube.status["effectiveMinIdle"] == 3
    clock.at += 2
    await pools.reconcile(runtime, handle, kopf.Body(body))
    assert kube.status["effectiveMinIdle"] == 1  # down at 2 a minute, once the window is past
