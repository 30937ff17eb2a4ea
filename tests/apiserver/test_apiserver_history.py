"""The local API server's watch history stays bounded by count, age and bytes, on a fake clock.

Each resource's history holds a full copy of every object it logs; these prove it forgets events
past each bound, always keeps the newest, and that a watch from a forgotten resource version is
told it expired (the watch answers that with an in-stream 410), as etcd compaction does.
"""

from __future__ import annotations

import json

from agentpool.local.apiserver.storage.store import COUNT_ONLY, HistoryLimits, Log, Store

PODS = ("", "pods")


class FakeClock:
    """Monotonic seconds that move only when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _obj(name: str, payload: int = 0) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": "ns"}, "data": "x" * payload}


def _size(obj: dict[str, object]) -> int:
    return len(json.dumps(obj, separators=(",", ":")).encode())


def _fill(log: Log, count: int, *, start_rv: int = 10, payload: int = 0) -> None:
    for n in range(count):
        log.append(start_rv + n, "ADDED", _obj(f"o{n}", payload), None)


def test_events_older_than_the_age_bound_are_forgotten_on_the_next_write() -> None:
    """After 5 minutes an event is dropped when the resource is next written; a watch from its
    resource version expires, one from the last dropped version still follows the rest."""
    clock = FakeClock()
    log = Log(HistoryLimits(seconds=300), floor_rv=1, clock=clock)
    _fill(log, 3, start_rv=10)
    clock.now += 301
    log.append(20, "MODIFIED", _obj("o0"), None)
    assert [event.rv for event in log.events] == [20]
    assert log.seq_after(11) is None
    assert log.seq_after(12) == log.base


def test_a_quiet_resource_is_trimmed_by_the_sweep() -> None:
    """Store.trim applies the age bound to a resource nobody writes to, keeping its newest event."""
    clock = FakeClock()
    store = Store(history=HistoryLimits(seconds=300), clock=clock)
    for n in range(5):
        store.put(PODS, _obj(f"p{n}"), None)
    clock.now += 299
    store.trim()
    assert len(store.bucket(PODS).log.events) == 5
    clock.now += 2
    store.trim()
    assert len(store.bucket(PODS).log.events) == 1


def test_the_bytes_bound_keeps_the_history_under_it() -> None:
    """Events are dropped oldest first until what is kept fits the byte bound."""
    one = _size(_obj("o49", 1000))
    log = Log(HistoryLimits(seconds=None, bytes=10 * one), floor_rv=1, clock=FakeClock())
    _fill(log, 50, payload=1000)
    assert log.bytes <= 10 * one
    assert len(log.events) == 10
    assert log.bytes == sum(_size(event.obj) for event in log.events)
    assert log.seq_after(log.events[0].rv - 2) is None


def test_the_newest_event_is_kept_even_past_the_bytes_bound() -> None:
    """An object bigger than the whole bound is still kept as the newest event, so a watcher
    that is keeping up receives it rather than a 410."""
    log = Log(HistoryLimits(seconds=None, bytes=100), floor_rv=1, clock=FakeClock())
    _fill(log, 3, payload=500)
    assert [event.rv for event in log.events] == [12]
    assert log.seq_after(11) == log.base


def test_the_count_bound_drops_a_batch_at_twice_the_limit() -> None:
    """As before age and bytes bounds: up to twice ``events`` are kept, then the oldest half
    goes in one step."""
    log = Log(HistoryLimits(events=5, seconds=None, bytes=None), floor_rv=1, clock=FakeClock())
    _fill(log, 9)
    assert len(log.events) == 9
    _fill(log, 1, start_rv=100)
    assert len(log.events) == 5
    assert log.base == 5


def test_count_only_history_keeps_old_and_large_events() -> None:
    """The old, count-only history (the bench's baseline) keeps events however old or large."""
    clock = FakeClock()
    log = Log(COUNT_ONLY, floor_rv=1, clock=clock)
    _fill(log, 20, payload=100_000)
    clock.now += 3600
    log.trim()
    assert len(log.events) == 20


def test_compaction_forgets_the_bytes_too() -> None:
    """A full compaction leaves nothing counted, so later writes are bounded from zero."""
    log = Log(HistoryLimits(), floor_rv=1, clock=FakeClock())
    _fill(log, 3, payload=100)
    log.compact(50)
    assert (log.events, log.bytes) == ([], 0)
    assert log.seq_after(49) is None


def test_limits_from_a_command_line() -> None:
    """0 turns a bound off, None keeps its default."""
    assert HistoryLimits.of(seconds=0, mib=0) == HistoryLimits(seconds=None, bytes=None)
    assert HistoryLimits.of() == HistoryLimits()
    assert HistoryLimits.of(mib=1.5).bytes == 3 * 512 * 1024
