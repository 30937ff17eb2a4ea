"""The in-memory object store: objects by resource, namespace and name, plus event logs.

Stored objects are never mutated: every write stores a fresh dict, so a watch event can hold the
object itself and serialise it once for all watchers. One global counter supplies resource
versions, as etcd's revision does. Each resource keeps a log of its recent events, bounded by
count, age and bytes (``HistoryLimits``) as etcd compaction and the watch cache bound theirs, so a
long session's memory stays flat; a watch from a resource version older than the log answers 410
Expired, as the real watch cache does. Owner references are indexed so garbage collection finds
dependents without a scan. The write paths in ``writes`` and ``deletion`` change it; the server's
sweep trims quiet resources' history.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

Key = tuple[str, str]
ObjectRef = tuple[Key, str, str]
"""Where one object is stored: its resource's key, its namespace and its name."""
Obj = dict[str, Any]
MiB = 1024 * 1024


@dataclass(frozen=True)
class HistoryLimits:
    """How much watch history each resource keeps; an event past any bound is forgotten.

    ``events``: the count kept (up to twice this many before a batch is dropped). ``seconds``:
    the age past which an event is dropped; kube-apiserver's watch cache keeps from about 75 s to a
    few minutes, and 5 minutes covers kopf's 70 s inactivity reconnect with room to spare.
    ``bytes``: the JSON bytes of the events kept; each event holds a full copy of its object, so
    without it the status writes of long runs (up to 128 KiB each) kept hundreds of MiB. The
    newest event is always kept, so a watcher that is keeping up never sees a 410. None: no such
    bound.
    """

    events: int = 10_000
    seconds: float | None = 300.0
    bytes: int | None = 32 * MiB

    @classmethod
    def of(
        cls, *, events: int | None = None, seconds: float | None = None, mib: float | None = None
    ) -> HistoryLimits:
        """Limits as command lines give them: None keeps the default, 0 means no such bound."""
        default = cls()
        return cls(
            events=default.events if events is None else events,
            seconds=default.seconds if seconds is None else (seconds or None),
            bytes=default.bytes if mib is None else (round(mib * MiB) or None),
        )


DEFAULT_HISTORY = HistoryLimits()

#: The history before it was bounded by age and bytes: 10,000 events of any size, kept forever.
COUNT_ONLY = HistoryLimits(events=10_000, seconds=None, bytes=None)


@dataclass(slots=True)
class Event:
    """One change to one object; ``previous`` lets selector watches see objects move in or out."""

    seq: int
    rv: int
    type: str
    obj: Obj
    previous: Obj | None
    at: float = 0.0
    _encoded: bytes | None = field(default=None)

    def encoded(self) -> bytes:
        """The object as JSON, encoded once however many watchers send it."""
        if self._encoded is None:
            self._encoded = json.dumps(self.obj, separators=(",", ":")).encode()
        return self._encoded


class Log:
    """A resource's recent events, bounded by ``HistoryLimits``; readers follow it by sequence
    number. ``clock`` (monotonic seconds) dates each event for the age bound."""

    def __init__(
        self, limits: HistoryLimits, floor_rv: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limits = limits
        self.events: list[Event] = []
        self.base = 0
        self.floor_rv = floor_rv
        self.bytes = 0
        self.closed = False
        self.epoch = 0
        self._clock = clock
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def end(self) -> int:
        return self.base + len(self.events)

    def append(self, rv: int, kind: str, obj: Obj, previous: Obj | None) -> None:
        event = Event(self.end, rv, kind, obj, previous, self._clock())
        # Encoding now measures the event, and watchers would encode it anyway.
        self.bytes += len(event.encoded())
        self.events.append(event)
        self.trim()
        self.wake()

    def trim(self) -> None:
        """Forget the oldest events past any bound; a watch from before them then gets 410."""
        events, limits = self.events, self.limits
        cut = len(events) - limits.events if len(events) >= 2 * limits.events else 0
        dropped = sum(len(event.encoded()) for event in events[:cut])
        oldest = self._clock() - limits.seconds if limits.seconds is not None else None
        while cut < len(events) - 1 and (
            (limits.bytes is not None and self.bytes - dropped > limits.bytes)
            or (oldest is not None and events[cut].at < oldest)
        ):
            dropped += len(events[cut].encoded())
            cut += 1
        if cut:
            self.floor_rv = events[cut - 1].rv
            del events[:cut]
            self.base += cut
            self.bytes -= dropped

    def wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def compact(self, rv: int) -> None:
        """Forget every event up to ``rv`` and expire open watches, as etcd compaction does."""
        self.base = self.end
        self.events = []
        self.bytes = 0
        self.floor_rv = rv
        self.epoch += 1
        self.wake()

    def seq_after(self, rv: int) -> int | None:
        """The first sequence number with a resource version above ``rv``; None if expired."""
        if rv < self.floor_rv:
            return None
        index = bisect.bisect_right(self.events, rv, key=lambda e: e.rv)
        return self.base + index

    def read(self, seq: int) -> list[Event] | None:
        """Events from ``seq`` on; None when the reader fell behind the log."""
        if seq < self.base:
            return None
        return self.events[seq - self.base :]

    async def wait(self, seq: int, timeout: float) -> None:
        if seq < self.end:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(waiter, timeout)


class Bucket:
    """All objects of one resource, by namespace then name ("" for cluster-scoped)."""

    def __init__(self, log: Log) -> None:
        self.by_ns: dict[str, dict[str, Obj]] = {}
        self.log = log
        self.count = 0

    def get(self, namespace: str, name: str) -> Obj | None:
        names = self.by_ns.get(namespace)
        return names.get(name) if names is not None else None

    def items(self, namespace: str | None) -> Iterator[Obj]:
        if namespace is not None:
            yield from list(self.by_ns.get(namespace, {}).values())
            return
        for names in list(self.by_ns.values()):
            yield from list(names.values())


@dataclass(eq=False, kw_only=True)
class Store:
    """Objects, resource versions, event logs and the owner index.

    ``rv`` is the last resource version handed out; ``dependents`` maps an owner's uid to the
    objects that name it, ``uids`` each stored object's uid to where it is stored.
    """

    history: HistoryLimits = DEFAULT_HISTORY
    clock: Callable[[], float] = time.monotonic
    rv: int = field(default=1, init=False)
    buckets: dict[Key, Bucket] = field(default_factory=dict, init=False)
    dependents: dict[str, set[ObjectRef]] = field(default_factory=dict, init=False)
    uids: dict[str, ObjectRef] = field(default_factory=dict, init=False)

    def bucket(self, key: Key) -> Bucket:
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = Bucket(Log(self.history, self.rv, self.clock))
        return bucket

    def next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def get(self, key: Key, namespace: str, name: str) -> Obj | None:
        return self.bucket(key).get(namespace, name)

    def items(self, key: Key, namespace: str | None = None) -> Iterator[Obj]:
        return self.bucket(key).items(namespace)

    def put(self, key: Key, obj: Obj, previous: Obj | None) -> Obj:
        """Store ``obj`` under a fresh resource version and log ADDED or MODIFIED."""
        rv = self.next_rv()
        obj["metadata"]["resourceVersion"] = str(rv)
        meta = obj["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        bucket = self.bucket(key)
        names = bucket.by_ns.setdefault(namespace, {})
        if name not in names:
            bucket.count += 1
        names[name] = obj
        self.uids[meta.get("uid", "")] = (key, namespace, name)
        self._index_owners(key, previous, remove=True)
        self._index_owners(key, obj, remove=False)
        bucket.log.append(rv, "ADDED" if previous is None else "MODIFIED", obj, previous)
        return obj

    def remove(self, key: Key, obj: Obj) -> Obj:
        """Drop the object and log DELETED with a fresh resource version."""
        meta = obj["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        bucket = self.bucket(key)
        names = bucket.by_ns.get(namespace, {})
        if names.pop(name, None) is not None:
            bucket.count -= 1
        if not names:
            bucket.by_ns.pop(namespace, None)
        self.uids.pop(meta.get("uid", ""), None)
        self._index_owners(key, obj, remove=True)
        rv = self.next_rv()
        gone = {**obj, "metadata": {**meta, "resourceVersion": str(rv)}}
        bucket.log.append(rv, "DELETED", gone, obj)
        return gone

    def drop_resource(self, key: Key) -> None:
        """Forget a resource whose CRD was deleted, ending its watches."""
        bucket = self.buckets.pop(key, None)
        if bucket is not None:
            for obj in bucket.items(None):
                self._index_owners(key, obj, remove=True)
                self.uids.pop(obj["metadata"].get("uid", ""), None)
            bucket.log.closed = True
            bucket.log.wake()

    def owned_by(self, uid: str) -> list[ObjectRef]:
        return sorted(self.dependents.get(uid, ()))

    def compact(self) -> None:
        """Compact every resource's history at the current resource version."""
        for bucket in self.buckets.values():
            bucket.log.compact(self.rv)

    def trim(self) -> None:
        """Apply the history's age bound to resources that have had no write for a while."""
        for bucket in self.buckets.values():
            bucket.log.trim()

    def wake_all(self) -> None:
        for bucket in self.buckets.values():
            bucket.log.wake()

    def _index_owners(self, key: Key, obj: Obj | None, *, remove: bool) -> None:
        if obj is None:
            return
        meta = obj["metadata"]
        refs: Iterable[dict[str, Any]] = meta.get("ownerReferences") or ()
        entry = (key, meta.get("namespace", ""), meta["name"])
        for ref in refs:
            uid = ref.get("uid")
            if not isinstance(uid, str):
                continue
            if remove:
                owned = self.dependents.get(uid)
                if owned is not None:
                    owned.discard(entry)
                    if not owned:
                        del self.dependents[uid]
            else:
                self.dependents.setdefault(uid, set()).add(entry)
