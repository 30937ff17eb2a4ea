"""Listings that starting pools share: one LIST of a namespace's agent pods, or of its leases,
for every pool of it that asked before the LIST began.

After a restart every pool starts at once, and each needs its pods and its namespace's Bound
leases before it serves a checkout. One LIST a pool each (2,000 at 1,000 pools, every one of
them answered by scanning all the namespace's pods) queued on the API server and the client's
worker threads: the restarted operator served its last pool a minute later. Here a pool's
request waits for the next LIST of its namespace, which takes every request made before it
began (up to :data:`BATCH` pools, by the set-based selector ``agentpool.dev/pool in (...)``), so
what a pool gets is never older than its request, as with a LIST of its own; the pod events
seen meanwhile are joined with it by the caller (:mod:`agentpool.pool.listing`).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Generic, TypeVar

from agentpool.api.raw import RawBody
from agentpool.io.kube import Kube
from agentpool.pool.manifests import POOL_LABEL

T = TypeVar("T")

#: The most pools one LIST of pods asks for: the selector names them all in its URL.
BATCH = 100

#: Fetches what each of the keys asked for, in one call for the namespace.
Fetch = Callable[[str, list[str]], Awaitable[Mapping[str, T]]]


class Gathered(Generic[T]):
    """Requests by (namespace, key) answered in batches: at most one call in flight per
    namespace, each for every key asked before it began (at most ``batch`` keys a call)."""

    def __init__(self, fetch: Fetch[T], *, batch: int | None = None) -> None:
        self._fetch = fetch
        self._batch = batch
        self._asked: dict[str, dict[str, list[asyncio.Future[T]]]] = {}
        self._fetching: dict[str, asyncio.Task[None]] = {}

    async def get(self, namespace: str, key: str) -> T:
        """What ``key`` of ``namespace`` asks for, from a call begun after this request."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._asked.setdefault(namespace, {}).setdefault(key, []).append(future)
        running = self._fetching.get(namespace)
        if running is None or running.done():
            task = asyncio.create_task(self._drain(namespace))
            self._fetching[namespace] = task
            task.add_done_callback(functools.partial(self._ended, namespace))
        return await future

    async def _drain(self, namespace: str) -> None:
        while asked := self._asked.get(namespace):
            # In the order asked: the first pools to ask are the first served.
            taken = {key: asked.pop(key) for key in list(asked)[: self._batch]}
            if not asked:
                del self._asked[namespace]
            try:
                found = await self._fetch(namespace, list(taken))
            except asyncio.CancelledError:
                _settle(taken, None)
                raise
            except Exception as error:  # each asker gets it, as from a call of its own
                _settle(taken, error)
                continue
            for key, futures in taken.items():
                for future in futures:
                    if future.done():
                        continue
                    if key in found:
                        future.set_result(found[key])
                    else:
                        future.set_exception(LookupError(f"{namespace}/{key}: not in the listing"))

    def _ended(self, namespace: str, task: asyncio.Task[None]) -> None:
        """The namespace's calls are done, or were stopped (the operator exits, even before the
        first began): unless a request since started the next, nobody is left waiting for a
        call that never comes."""
        if self._fetching.get(namespace) is task:
            del self._fetching[namespace]
            _settle(self._asked.pop(namespace, {}), None)


def _settle(taken: Mapping[str, list[asyncio.Future[T]]], error: Exception | None) -> None:
    """Fail the futures not done yet with ``error``; cancel them without one."""
    for futures in taken.values():
        for future in futures:
            if future.done():
                continue
            if error is None:
                future.cancel()
            else:
                future.set_exception(error)


def pool_selector(pools: list[str]) -> str:
    """The label selector of the agent pods of ``pools``."""
    if len(pools) == 1:
        return f"{POOL_LABEL}={pools[0]}"
    return f"{POOL_LABEL} in ({','.join(pools)})"


class Listings:
    """The pods of starting pools, and their namespaces' leases, listed together."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self.pods: Gathered[list[RawBody]] = Gathered(self._list_pods, batch=BATCH)
        self.leases: Gathered[list[RawBody]] = Gathered(self._list_leases)

    async def _list_pods(self, namespace: str, pools: list[str]) -> dict[str, list[RawBody]]:
        found: dict[str, list[RawBody]] = {pool: [] for pool in pools}
        for pod in await self._kube.list_pods(namespace, pool_selector(pools)):
            labels = pod["metadata"].get("labels") or {}
            found.get(labels.get(POOL_LABEL, ""), []).append(pod)
        return found

    async def _list_leases(self, namespace: str, pools: list[str]) -> dict[str, list[RawBody]]:
        listed = await self._kube.list_custom("agentleases", namespace)
        return dict.fromkeys(pools, listed)
