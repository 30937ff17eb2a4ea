"""A lease as its holder lives it: create, wait for Bound, call the agent, renew, release.

:func:`hold` is what ``Client.lease`` enters. It creates the AgentLease, waits on a watch for the
operator's verdict (Bound, or the reason it failed), reads the lease's token from the Secret its
status names, and yields a :class:`LeasedAgent`. While the block runs a task renews the lease
(``spec.renewTime``) every ttl times ``renew_fraction``; when the block ends, however it ends
(an exception, a cancellation), the lease is deleted, which gives the agent back to the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentpool.api import AgentLeaseStatus, KeyRef
from agentpool.api.conditions import format_micro_time
from agentpool.api.reasons import Reason
from agentpool.client.agents import AgentCaller
from agentpool.client.cluster import Cluster
from agentpool.client.errors import (
    BIND_TIMEOUT,
    LEASE_DELETED,
    AgentpoolError,
    CallFailed,
    LeaseFailed,
    NotFound,
    lease_error,
)
from agentpool.wire import protocol
from agentpool.wire.envelopes import envelope_body

PLURAL = "agentleases"


@dataclass(frozen=True)
class LeaseRequest:
    """What the holder asks for: the AgentLease spec, and how long to wait for it."""

    pool: str
    ttl_seconds: int
    context: Any = None
    wait: bool = True
    priority: int = 0
    checkout_timeout_seconds: int | None = None

    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "poolRef": {"name": self.pool},
            "ttlSeconds": self.ttl_seconds,
            "wait": self.wait,
            "priority": self.priority,
        }
        if self.checkout_timeout_seconds is not None:
            spec["checkoutTimeoutSeconds"] = self.checkout_timeout_seconds
        if self.context is not None:
            spec["context"] = self.context
        return spec


class LeasedAgent:
    """One agent held by a lease: call it with :meth:`invoke` until the block ends.

    Calls go one at a time, in the order they are made: the lease holds every slot of the
    agent, but this client sends the next call once the last is answered.
    ``name`` is the agent's pod, ``lease`` the AgentLease's name, ``token_secret_ref`` the Secret
    key holding the token, ``expire_time`` when the lease expires unless renewed.
    """

    def __init__(
        self,
        cluster: Cluster,
        caller: AgentCaller,
        *,
        lease: str,
        status: AgentLeaseStatus,
        token: str,
        call_timeout: float,
    ) -> None:
        assert status.agent is not None
        assert status.endpoint is not None
        assert status.token_secret_ref is not None
        self.lease = lease
        self.name: str = status.agent
        self.endpoint: str = status.endpoint
        self.token_secret_ref: KeyRef = status.token_secret_ref
        self.expire_time: datetime | None = status.expire_time
        self._cluster = cluster
        self._caller = caller
        self._token = token
        self._call_timeout = call_timeout
        self._calls = 0
        self._turn = asyncio.Lock()
        self._ended: AgentpoolError | None = None
        self._end = asyncio.Event()

    @property
    def ended(self) -> AgentpoolError | None:
        """Why the lease ended while held (expired, lost, deleted), or None while it holds."""
        return self._ended

    async def wait_ended(self) -> AgentpoolError:
        """Until the lease ends while held; why it did."""
        await self._end.wait()
        assert self._ended is not None
        return self._ended

    def end(self, error: AgentpoolError) -> None:
        """The lease ended under its holder: every call from now on raises ``error``."""
        if self._ended is None:
            self._ended = error
            self._end.set()

    async def invoke(self, item: Any, input: Any = None, *, timeout: float | None = None) -> Any:
        """The agent's output for ``item`` (with ``input`` beside it, as a run's input is).

        Raises :class:`CallFailed` with the agent's reason, or :class:`LeaseFailed` once the
        lease has ended (its token is refused then).
        """
        async with self._turn:
            if self._ended is None and self._past_expiry():
                # Past the expiry last seen (no renewal came through): ask before calling.
                await self._check()
            if self._ended is not None:
                raise self._ended.with_traceback(None)
            self._calls += 1
            envelope = envelope_body(
                id=f"{self.lease}-{self._calls}", item=item, input=input, attempt=1, run=None
            )
            try:
                return await self._caller.invoke(
                    self.endpoint,
                    self._token,
                    envelope,
                    timeout=self._call_timeout if timeout is None else timeout,
                )
            except CallFailed as failure:
                if failure.reason == protocol.UNAUTHORIZED:
                    # The agent refuses the token: the lease has most likely ended; say why.
                    await self._check()
                    if self._ended is not None:
                        raise self._ended.with_traceback(None) from None
                raise

    def _past_expiry(self) -> bool:
        return self.expire_time is not None and time.time() >= self.expire_time.timestamp()

    async def _check(self) -> None:
        try:
            status = AgentLeaseStatus.model_validate(
                (await self._cluster.get(PLURAL, self.lease)).get("status") or {}
            )
        except NotFound:
            self.end(LeaseFailed(LEASE_DELETED, f"lease {self.lease} was deleted"))
            return
        except AgentpoolError:
            return
        error = lease_error(status)
        if error is not None:
            self.end(error)
        elif status.phase == "Bound":
            self.expire_time = status.expire_time


async def wait_bound(
    cluster: Cluster, name: str, *, version: str | None, timeout: float
) -> AgentLeaseStatus:
    """The lease's status once Bound; raises the error of its verdict when it fails, or
    BindTimeout when no verdict comes within ``timeout``."""
    last = AgentLeaseStatus()
    try:
        async with (
            asyncio.timeout(timeout),
            contextlib.aclosing(cluster.watch(PLURAL, name, version=version)) as events,
        ):
            async for kind, obj in events:
                if kind == "DELETED":
                    raise LeaseFailed(LEASE_DELETED, f"lease {name} was deleted before it bound")
                last = AgentLeaseStatus.model_validate(obj.get("status") or {})
                error = lease_error(last)
                if error is not None:
                    raise error
                if last.phase == "Bound" and last.endpoint and last.token_secret_ref:
                    return last
    except TimeoutError:
        pass
    said = f" (phase {last.phase}: {last.message})" if last.phase else " (no status yet)"
    raise LeaseFailed(
        BIND_TIMEOUT,
        f"lease {cluster.namespace}/{name} was not bound within {timeout:g}s{said}; is the "
        f"operator running and serving namespace {cluster.namespace}?",
    )


async def renew(cluster: Cluster, agent: LeasedAgent, *, every: float) -> None:
    """Renew the lease every ``every`` seconds until it ends; a passing API error is retried at
    the next turn, while the ttl still covers it."""
    while agent.ended is None:
        await asyncio.sleep(every)
        try:
            obj = await cluster.patch_spec(
                PLURAL, agent.lease, {"renewTime": format_micro_time(time.time())}
            )
        except NotFound:
            agent.end(LeaseFailed(LEASE_DELETED, f"lease {agent.lease} was deleted"))
            return
        except AgentpoolError:
            continue
        status = AgentLeaseStatus.model_validate(obj.get("status") or {})
        error = lease_error(status)
        if error is not None:
            agent.end(error)
            return
        agent.expire_time = status.expire_time or agent.expire_time


@contextlib.asynccontextmanager
async def hold(
    cluster: Cluster,
    caller: AgentCaller,
    request: LeaseRequest,
    *,
    bind_timeout: float,
    call_timeout: float,
    renew_fraction: float,
) -> AsyncIterator[LeasedAgent]:
    """Create the lease, yield its agent once Bound, renew it while held, delete it after."""
    created = await cluster.create(
        PLURAL, request.spec(), name=None, generate_name=f"{request.pool}-"
    )
    metadata = created["metadata"]
    name = str(metadata["name"])
    agent: LeasedAgent | None = None
    renewing: asyncio.Task[None] | None = None
    try:
        status = await wait_bound(
            cluster, name, version=metadata.get("resourceVersion"), timeout=bind_timeout
        )
        ref = status.token_secret_ref
        assert ref is not None
        token = await cluster.secret_value(ref.name, ref.key)
        agent = LeasedAgent(
            cluster, caller, lease=name, status=status, token=token, call_timeout=call_timeout
        )
        every = max(1.0, request.ttl_seconds * renew_fraction)
        renewing = asyncio.create_task(renew(cluster, agent, every=every), name=f"renew {name}")
        yield agent
    except BaseException:
        # The block's own error is the one to see: a failed delete leaves the lease to its ttl.
        with contextlib.suppress(AgentpoolError):
            await release(cluster, name, agent, renewing)
        raise
    await release(cluster, name, agent, renewing)


async def release(
    cluster: Cluster,
    name: str,
    agent: LeasedAgent | None,
    renewing: asyncio.Task[None] | None,
) -> None:
    """Stop renewing and delete the lease, which gives its agent back to the pool; a call on
    the agent after this raises at once.

    Shielded, so a cancelled holder still gives its agent back rather than leave it to the ttl.
    """
    if agent is not None:
        agent.end(LeaseFailed(str(Reason.RELEASED), f"lease {name} was released by its holder"))
    if renewing is not None:
        renewing.cancel()
    await asyncio.shield(cluster.delete(PLURAL, name))


def bind_timeout_of(checkout_timeout: float | None, *, default: float, grace: float) -> float:
    """How long to wait for a lease's verdict: the checkout timeout it asks for plus ``grace``,
    or ``default`` when it asks for none (the pool's own applies, which the client does not
    read)."""
    return default if checkout_timeout is None else math.ceil(checkout_timeout) + grace
