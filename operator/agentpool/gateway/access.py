"""Who may call a pool: the cluster's TokenReview and SubjectAccessReview, remembered briefly.

Every request carries a Kubernetes bearer token. :class:`Access` asks the cluster who holds it
(TokenReview) and whether they may ``create`` the subresource ``agentpools/call`` (or ``/cast``)
of the pool in its namespace, or ``get``, ``create``, ... ``agentpools/proxy`` as the forwarded
request's method says (SubjectAccessReview), as kube-rbac-proxy does for the services it guards.
Both answers are kept for at most ``ttl`` seconds, and at most ``entries`` of each, so a
steady caller costs no API request per call while a deleted RoleBinding or a revoked token
takes effect within ``ttl``. Lookups of the same key in flight at once share one review. A
token is kept only as its SHA-256 digest.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from agentpool.gateway.contracts import Caller, Reviewer, ReviewFailed
from agentpool.gateway.errors import forbidden, unauthorized, unavailable
from agentpool.wire.tokens import bearer_token

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Remembered(Generic[K, V]):
    """Answers by key for ``ttl`` seconds, at most ``entries`` of them (the least recently used
    go first); lookups of one key in flight share one computation."""

    def __init__(self, *, ttl: float, entries: int, clock: Callable[[], float]) -> None:
        self._ttl = ttl
        self._entries = entries
        self._clock = clock
        self._kept: collections.OrderedDict[K, tuple[float, V]] = collections.OrderedDict()
        self._pending: dict[K, asyncio.Task[V]] = {}

    def __len__(self) -> int:
        return len(self._kept)

    async def get(self, key: K, compute: Callable[[], Awaitable[V]]) -> V:
        """The answer for ``key``: remembered, or computed now (once for every caller waiting
        on it; a caller that gives up does not stop it for the others)."""
        kept = self._kept.get(key)
        if kept is not None:
            if kept[0] > self._clock():
                self._kept.move_to_end(key)
                return kept[1]
            del self._kept[key]
        task = self._pending.get(key)
        if task is None:
            task = asyncio.ensure_future(compute())
            self._pending[key] = task
            task.add_done_callback(lambda done: self._settle(key, done))
        return await asyncio.shield(task)

    def _settle(self, key: K, task: asyncio.Task[V]) -> None:
        self._pending.pop(key, None)
        if task.cancelled() or task.exception() is not None:
            return  # not an answer: the next lookup asks again
        self._kept[key] = (self._clock() + self._ttl, task.result())
        self._kept.move_to_end(key)
        while len(self._kept) > self._entries:
            self._kept.popitem(last=False)


class Access:
    """The gateway's door: a request's token in, the caller out, or the 401 or 403 to answer."""

    def __init__(
        self,
        reviewer: Reviewer,
        *,
        ttl: float,
        entries: int,
        retry_after: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._reviewer = reviewer
        self._retry_after = retry_after
        self.callers: Remembered[bytes, Caller | None] = Remembered(
            ttl=ttl, entries=entries, clock=clock
        )
        self.grants: Remembered[tuple[Caller, str, str, str, str, str], bool] = Remembered(
            ttl=ttl, entries=entries, clock=clock
        )

    async def admit(
        self,
        authorization: str | None,
        *,
        verb: str,
        subresource: str,
        namespace: str,
        pool: str,
        resource: str = "agentpools",
    ) -> Caller:
        """The caller a request's ``Authorization`` header names, once the cluster says they may
        ``verb`` the ``subresource`` of ``pool`` (of ``resource``: a lease's, for one forwarded
        to a lease); raises the :class:`GatewayError` to answer otherwise."""
        token = bearer_token(authorization or "")
        if not token:
            raise unauthorized(
                "send a Kubernetes bearer token (Authorization: Bearer ...), for example one "
                "from `kubectl create token SERVICEACCOUNT` or a projected service-account token"
            )
        text = token.decode("utf-8", "replace")
        try:
            caller = await self.callers.get(
                hashlib.sha256(token).digest(), lambda: self._reviewer.authenticate(text)
            )
            if caller is None:
                raise unauthorized(
                    "the cluster does not authenticate this token (expired, revoked, or of "
                    "another cluster): get a fresh one, for example with `kubectl create token`"
                )
            allowed = await self.grants.get(
                (caller, verb, resource, subresource, namespace, pool),
                lambda: self._reviewer.authorize(
                    caller,
                    verb=verb,
                    resource=resource,
                    subresource=subresource,
                    namespace=namespace,
                    pool=pool,
                ),
            )
        except ReviewFailed as error:
            raise unavailable(
                f"cannot check the caller's token with the cluster now: {error}",
                retry_after=self._retry_after,
            ) from None
        if not allowed:
            raise forbidden(caller.username, verb, f"{resource}/{subresource}", namespace, pool)
        return caller
