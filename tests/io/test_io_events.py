"""A series of Events (a pool's leases bound, and expired) costs one write a window, and loses
none: what ``kubectl describe agentpool`` shows adds up to every lease, with the latest one's
message. Time is looptime's: a window passes as soon as nothing else is left to run."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from typing import Any

import looptime
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentpool.io.events import EventApi, EventSeries
from agentpool.io.kube import Kube

WINDOW = 30.0
POOL = {
    "apiVersion": "agentpool.dev/v1alpha1",
    "kind": "AgentPool",
    "namespace": "ns",
    "name": "p",
    "uid": "uid-p",
}


class Events:
    """The Events created, each with the loop time it was written at; a create may fail."""

    def __init__(self) -> None:
        self.written: list[tuple[float, dict[str, Any]]] = []
        self.failing = False

    async def create_event(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        if self.failing:
            raise ConnectionError("the API server went away")
        self.written.append((asyncio.get_running_loop().time(), dict(body)))
        return dict(body)

    def counts(self) -> list[int]:
        return [body["count"] for _, body in self.written]


#: Kube and the fake make the one call EventSeries makes, as EventApi says: mypy checks these.
CALLS: tuple[type[EventApi], type[EventApi]] = (Kube, Events)


def bound(series: EventSeries, lease: str) -> None:
    series.post(POOL, type="Normal", reason="LeaseBound", message=f"Bound lease {lease}")


async def settle() -> None:
    """Until the writes started so far are done (a turn or two of the loop)."""
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.mark.looptime
async def test_leases_bound_at_once_are_one_event_written_at_once_about_the_pool() -> None:
    """Leases bound before the first write goes out are all in it."""
    events = Events()
    series = EventSeries(events, window_seconds=WINDOW)
    for n in range(32):
        bound(series, f"lease-{n}")
    await settle()
    assert events.counts() == [32]
    assert events.written[0][1]["message"] == "Bound lease lease-31"
    await series.close()


@pytest.mark.looptime
async def test_the_first_event_is_written_at_once_about_the_pool() -> None:
    events = Events()
    series = EventSeries(events, window_seconds=WINDOW, instance="op-1")
    bound(series, "a")
    await settle()
    ((at, body),) = events.written
    assert at == pytest.approx(asyncio.get_running_loop().time())
    assert body["involvedObject"] == POOL
    assert (body["type"], body["reason"], body["message"], body["count"]) == (
        "Normal",
        "LeaseBound",
        "Bound lease a",
        1,
    )
    assert body["metadata"]["namespace"] == "ns"
    assert (body["source"]["component"], body["reportingInstance"]) == ("agentpool", "op-1")
    await series.close()


@pytest.mark.looptime
async def test_a_burst_is_one_more_event_after_the_window_counting_every_lease() -> None:
    """A lease, then 31 more at once: the first is written at once, the other 31 as one Event
    once the window has passed, with the last lease's message and its time span."""
    events = Events()
    series = EventSeries(events, window_seconds=WINDOW)
    start = asyncio.get_running_loop().time()
    bound(series, "lease-0")
    await settle()
    for n in range(1, 32):
        bound(series, f"lease-{n}")
    await settle()
    assert events.counts() == [1]
    await asyncio.sleep(WINDOW + 1)
    assert events.counts() == [1, 31]
    at, body = events.written[1]
    assert at == pytest.approx(start + WINDOW, abs=0.01)
    assert body["message"] == "Bound lease lease-31"
    assert body["firstTimestamp"] <= body["lastTimestamp"]
    await series.close()


@pytest.mark.looptime
async def test_a_lease_after_a_quiet_window_is_written_at_once() -> None:
    events = Events()
    series = EventSeries(events, window_seconds=WINDOW)
    bound(series, "a")
    await asyncio.sleep(WINDOW * 2)
    bound(series, "b")
    await settle()
    assert [body["message"] for _, body in events.written] == ["Bound lease a", "Bound lease b"]
    await series.close()


@pytest.mark.looptime
async def test_a_stopping_operator_writes_what_it_counted_at_once() -> None:
    events = Events()
    series = EventSeries(events, window_seconds=WINDOW)
    start = asyncio.get_running_loop().time()
    for n in range(3):
        bound(series, str(n))
        await settle()
    await series.close()
    assert events.counts() == [1, 2]
    assert events.written[-1][0] < start + WINDOW


@pytest.mark.looptime
async def test_a_refused_write_is_logged_with_how_many_it_held(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An Event never fails the lease it tells of: a write the API server refuses is logged,
    naming how many Events it stood for, and the series goes on."""
    events = Events()
    series = EventSeries(events, window_seconds=WINDOW)
    events.failing = True
    bound(series, "a")
    await settle()
    assert "LeaseBound Event about p unwritten, 1 of them: posting it failed" in caplog.text
    events.failing = False
    await asyncio.sleep(WINDOW + 1)
    bound(series, "b")
    await settle()
    assert events.counts() == [1]
    await series.close()


@pytest.mark.looptime
async def test_pools_of_one_name_in_two_namespaces_are_two_series() -> None:
    """Two pools whose uids the operator no longer knows (each deleted since its lease bound)
    still get an Event each, about themselves."""
    events = Events()
    series = EventSeries(events, window_seconds=WINDOW)
    for namespace in ("team-a", "team-b"):
        pool = {**POOL, "namespace": namespace, "uid": ""}
        series.post(pool, type="Normal", reason="LeaseExpired", message=namespace)
    await settle()
    written = {
        (b["metadata"]["namespace"], b["involvedObject"]["namespace"], b["message"])
        for _, b in events.written
    }
    assert written == {("team-a", "team-a", "team-a"), ("team-b", "team-b", "team-b")}
    await series.close()


class Stuck(Events):
    """An API server that never answers an Event's create."""

    async def create_event(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


@pytest.mark.looptime
async def test_a_stopping_operator_gives_up_on_a_stuck_write_and_says_how_many_it_held(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Stopping waits a few seconds for the API server, no longer; what it could not write is
    logged with its count, and nothing posted after the stop is started."""
    series = EventSeries(Stuck(), window_seconds=WINDOW)
    bound(series, "a")
    await settle()
    bound(series, "b")
    bound(series, "c")
    start = asyncio.get_running_loop().time()
    await series.close()
    assert asyncio.get_running_loop().time() - start == pytest.approx(5.0, abs=0.1)
    assert "unwritten, 1 of them: the operator stopped before the API server took it" in (
        caplog.text
    )
    assert "unwritten, 2 of them: the operator stopped before it was written" in caplog.text
    bound(series, "d")
    assert "not posting LeaseBound Event about p: the operator stops" in caplog.text


@settings(max_examples=40, deadline=None)
@given(
    gaps=st.lists(st.floats(min_value=0.0, max_value=3 * WINDOW), min_size=1, max_size=40),
    reasons=st.lists(st.sampled_from(["LeaseBound", "LeaseExpired"]), min_size=40, max_size=40),
)
def test_events_add_up_to_every_post_and_come_a_window_apart(
    gaps: list[float], reasons: list[str]
) -> None:
    """However the posts fall in time, each reason's Events count every post once, and two
    writes of a series are at least a window apart (but the one a stopping operator makes)."""

    async def scenario() -> None:
        events = Events()
        series = EventSeries(events, window_seconds=WINDOW)
        for gap, reason in zip(gaps, reasons, strict=False):
            await asyncio.sleep(gap)
            series.post(POOL, type="Normal", reason=reason, message=reason)
        await asyncio.sleep(WINDOW * 2)
        await series.close()
        for reason in set(reasons[: len(gaps)]):
            times = [at for at, body in events.written if body["reason"] == reason]
            written = sum(b["count"] for _, b in events.written if b["reason"] == reason)
            assert written == reasons[: len(gaps)].count(reason)
            assert all(b - a >= WINDOW - 1e-6 for a, b in itertools.pairwise(times))

    with asyncio.Runner(loop_factory=looptime.new_event_loop) as runner:
        runner.run(scenario())
