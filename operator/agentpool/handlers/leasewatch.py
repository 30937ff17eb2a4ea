"""Following the AgentLeases on the operator's own watch, without kopf's handling of each event.

A lease's whole life is three watch events: its creation, the status the operator writes, its
deletion. kopf's per-event handling (a body, a patch, a logger and the handler's bookkeeping for
each) took about two fifths of the operator's CPU in a burst of leases, though the leases keep
no state of kopf's and need none of it. :func:`follow` reads the leases from
:meth:`agentpool.io.kube.Kube.watch` instead and hands each event to
:func:`agentpool.handlers.leases.lease_event`, as kopf did: one lease's events in the order they
came, one at a time, and different leases' side by side.

kopf also took its finalizer off a lease an older operator had put it on (one with a deletion
handler for leases), so the lease's deletion was not held for good; :func:`drop_old_finalizer`
does so here.

The operator follows them so when it acts alone (no peering: kopf pauses every watch of a replica
that stands by, and the leases stay with it then) on named namespaces or all of them, over its
API session (:attr:`~agentpool.io.kube.Kube.watches`); otherwise kopf watches them as before
(:func:`own_paths`).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable, Collection

from agentpool import GROUP, VERSION
from agentpool.api.raw import RawBody
from agentpool.handlers import leases
from agentpool.handlers.runtime import ObjectKey, Runtime
from agentpool.io.kube import ObjectNotFound
from agentpool.pool.placement import is_pattern

log = logging.getLogger(__name__)

#: The finalizer an older operator's kopf put on leases: nothing of this one's waits on it.
OLD_FINALIZER = f"{GROUP}/finalizer"

Handle = Callable[[str | None, RawBody], Awaitable[None]]


def own_paths(runtime: Runtime, *, peering: bool, namespaces: Collection[str]) -> list[str]:
    """The AgentLease collections the operator follows itself (:func:`follow`), each served
    namespace's or the cluster's; none, for kopf to watch them, unless it acts alone, on named
    namespaces (no pattern) or all of them, with its API session."""
    # kopf reads these as patterns, and a comma as a list of them.
    patterns = any(is_pattern(namespace) for namespace in namespaces)
    if peering or patterns or not runtime.kube.watches:
        return []
    base = f"/apis/{GROUP}/{VERSION}"
    if not namespaces:
        return [f"{base}/agentleases"]
    return [f"{base}/namespaces/{namespace}/agentleases" for namespace in sorted(set(namespaces))]


class Lanes:
    """Hands each object's events to ``handle`` in the order they came, one at a time, and
    different objects' side by side: a lane (a queue and a task) per object while it has
    events waiting."""

    def __init__(self, handle: Handle) -> None:
        self.handle = handle
        self.waiting: dict[ObjectKey, collections.deque[tuple[str | None, RawBody]]] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    def put(self, key: ObjectKey, kind: str | None, body: RawBody) -> None:
        lane = self.waiting.get(key)
        if lane is not None:
            lane.append((kind, body))
            return
        self.waiting[key] = collections.deque([(kind, body)])
        task = asyncio.create_task(self._drain(key))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _drain(self, key: ObjectKey) -> None:
        lane = self.waiting[key]
        try:
            while lane:
                kind, body = lane.popleft()
                try:
                    await self.handle(kind, body)
                except Exception:
                    log.exception("lease %s/%s: handling its %s event failed", *key, kind)
        finally:
            # No await since the lane was last seen empty: an event put from now on finds no
            # lane and starts another.
            del self.waiting[key]

    async def close(self) -> None:
        """Cancel the lanes still handling events, and wait for them to end; the events still
        waiting in them are dropped."""
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        # A lane cancelled before it began never reached its own clean-up.
        self.waiting.clear()


async def follow(runtime: Runtime, path: str) -> None:
    """Hand every event of the leases at ``path`` to :func:`~agentpool.handlers.leases.
    lease_event` until cancelled, as kopf would: listed ones (after a start or a watch the server
    no longer had) with no type."""

    async def handle(kind: str | None, body: RawBody) -> None:
        meta = body["metadata"]
        if kind != "DELETED" and OLD_FINALIZER in (meta.get("finalizers") or ()):
            await drop_old_finalizer(runtime, body)
        await leases.lease_event(
            runtime, type=kind, body=body, name=meta["name"], namespace=meta.get("namespace")
        )

    lanes = Lanes(handle)
    try:
        async for kind, body in runtime.kube.watch(path):
            meta = body.get("metadata") or {}
            lanes.put((meta.get("namespace") or "", meta.get("name") or ""), kind, body)
    finally:
        await lanes.close()


async def drop_old_finalizer(runtime: Runtime, body: RawBody) -> None:
    """Take :data:`OLD_FINALIZER` off the lease, where it is in its list as last seen: a JSON
    patch that tests it is still there first, so a list that changed meanwhile is left alone
    (the next event of the lease shows it again)."""
    meta = body["metadata"]
    at = list(meta["finalizers"]).index(OLD_FINALIZER)
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{meta['namespace']}/agentleases/{meta['name']}"
    patch = [
        {"op": "test", "path": f"/metadata/finalizers/{at}", "value": OLD_FINALIZER},
        {"op": "remove", "path": f"/metadata/finalizers/{at}"},
    ]
    try:
        await runtime.kube.request(
            "PATCH",
            path,
            body=patch,
            content_type="application/json-patch+json",
            resource="agentleases",
            read=False,
        )
    except ObjectNotFound:
        return
    except Exception as error:  # the test refused (the list changed), the API server away
        name = f"{meta['namespace']}/{meta['name']}"
        log.info("lease %s: its old finalizer stays until its next event: %s", name, error)
