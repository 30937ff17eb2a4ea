"""The local kubelet's event recorder: repeats fold into one Event, and a burst is cut short,
as client-go's event correlator does for a real kubelet."""

from __future__ import annotations

import pytest

from agentpool.local.kubelet.recorder import EventKey, EventRecorder, Posting

UNHEALTHY = EventKey("Warning", "Unhealthy", "Readiness probe failed: 503", "main")
REFUSED = EventKey("Warning", "Unhealthy", "Readiness probe failed: connection refused", "main")


def test_a_repeat_counts_into_the_event_posted_before() -> None:
    """The second of the same Event patches the first one's count, keeping its first time."""
    recorder = EventRecorder()
    assert recorder.record(UNHEALTHY, 10.0) == Posting(name=None, count=1, first=10.0)
    recorder.sent(UNHEALTHY, "pod.1")
    assert recorder.record(UNHEALTHY, 11.0) == Posting(name="pod.1", count=2, first=10.0)
    recorder.sent(UNHEALTHY, "pod.1")
    assert recorder.record(UNHEALTHY, 12.0) == Posting(name="pod.1", count=3, first=10.0)


def test_another_message_is_another_event() -> None:
    """A probe failing in other words is an Event of its own."""
    recorder = EventRecorder()
    recorder.record(UNHEALTHY, 10.0)
    recorder.sent(UNHEALTHY, "pod.1")
    assert recorder.record(REFUSED, 11.0) == Posting(name=None, count=1, first=11.0)


def test_an_event_that_could_not_be_written_is_created_again_with_its_count() -> None:
    """A failed write leaves no name to patch: the next repeat creates the Event, counted."""
    recorder = EventRecorder()
    recorder.record(UNHEALTHY, 10.0)
    recorder.sent(UNHEALTHY, None)
    assert recorder.record(UNHEALTHY, 11.0) == Posting(name=None, count=1, first=11.0)


@pytest.mark.parametrize(
    ("burst", "refill", "times", "written"),
    [
        (25, 300.0, [float(t) for t in range(30)], 25),  # a second apart: the burst, then none
        (25, 300.0, [0.0] * 25 + [300.0], 26),  # five minutes on: one more
        (3, 10.0, [0.0, 0.0, 0.0, 5.0, 10.0, 20.0], 5),  # one a refill after the burst
    ],
)
def test_the_spam_filter_lets_a_burst_through_then_one_a_refill(
    burst: int, refill: float, times: list[float], written: int
) -> None:
    """However fast a probe fails, a pod writes its burst and then one Event per refill."""
    recorder = EventRecorder(burst=burst, refill_seconds=refill)
    postings = [recorder.record(UNHEALTHY, at) for at in times]
    assert sum(1 for posting in postings if posting is not None) == written
