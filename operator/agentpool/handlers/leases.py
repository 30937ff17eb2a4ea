"""The AgentLease controller: one warm agent held for a client, returned on delete or expiry.

A kopf daemon per lease checks an agent out of the pool's broker (queueing, or failing at once
with PoolFull when ``wait`` is false), writes where to reach it and which Secret holds its token
(each status, with its conditions, as :mod:`agentpool.pool.leases` gives it), and holds it until
its ttl passes; a deleted lease's agent goes back in its deletion handler, so the daemon ends as
soon as kopf stops it. The agent goes back through the same path as a run's (reset between
holders when the pool asks for it). A restarted operator's pool loop takes a
Bound lease's agent back before serving anyone, and the lease daemon picks it up. What to
wait for and until when is :mod:`agentpool.pool.binding`'s to decide; :func:`register` binds
the module-level handlers to kopf.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import kopf

from agentpool import GROUP, VERSION
from agentpool.api import AgentLeaseSpec, AgentPoolSpec
from agentpool.api.conditions import format_time, merge_conditions, now_time
from agentpool.api.reasons import EventReason, Reason
from agentpool.broker import CheckinOutcome, Checkout, PoolClosed, PoolExhausted
from agentpool.broker.registry import PoolKey
from agentpool.handlers.checkins import return_agent
from agentpool.handlers.runtime import Runtime
from agentpool.io.kube import NotFound
from agentpool.pool import binding, leases
from agentpool.pool.manifests import TOKEN_KEY, token_secret_name

TERMINAL = frozenset({"Released", "Expired", "Failed"})

T = TypeVar("T")

Report = Callable[[dict[str, Any]], Awaitable[None]]


def _failed(reason: str, message: str) -> dict[str, Any]:
    return leases.ended_status("Failed", reason, message)


class StatusWriter:
    """Writes one lease's status, each patch with the conditions its phase gives, stamped with a
    transition time that moves only when a condition's status changes."""

    def __init__(self, runtime: Runtime, body: kopf.Body) -> None:
        self.runtime = runtime
        self.namespace = str(body["metadata"].get("namespace") or "")
        self.name = str(body["metadata"]["name"])
        self.generation: int | None = body["metadata"].get("generation")
        self.conditions: list[dict[str, Any]] = list(
            (body.get("status") or {}).get("conditions") or []
        )

    async def __call__(self, patch: dict[str, Any]) -> None:
        current = leases.lease_conditions(patch["phase"], patch["reason"], patch["message"])
        conditions = merge_conditions(
            self.conditions, current, generation=self.generation, now=now_time()
        )
        patch = {**patch, "conditions": conditions, "observedGeneration": self.generation}
        with contextlib.suppress(NotFound):
            await self.runtime.kube.patch_status("agentleases", self.namespace, self.name, patch)
        self.conditions = conditions


def register(registry: kopf.OperatorRegistry, runtime: Runtime) -> None:
    """Bind the AgentLease handlers to ``registry``, each given ``runtime``."""
    kopf.daemon(
        GROUP,
        VERSION,
        "agentleases",
        id="lease_loop",
        registry=registry,
        backoff=2,
        # The daemon ends by itself as soon as it is stopped (a deleted lease's agent goes back
        # in lease_release), so kopf never needs to cancel it.
        cancellation_backoff=runtime.settings.leases.stop_seconds,
        cancellation_timeout=10,
    )(functools.partial(lease_loop, runtime))
    kopf.on.delete(GROUP, VERSION, "agentleases", id="lease_release", registry=registry)(
        functools.partial(lease_release, runtime)
    )


async def lease_loop(
    runtime: Runtime,
    /,
    body: kopf.Body,
    name: str,
    namespace: str | None,
    stopped: kopf.DaemonStopped,
    **_: Any,
) -> None:
    """The lease's daemon: bind an agent, hold it until the ttl passes or it is lost, then
    return it; a stopped daemon leaves it to the deletion handler or the next daemon."""
    namespace = namespace or ""
    status = dict(body.get("status") or {})
    if status.get("phase") in TERMINAL:
        return
    spec = AgentLeaseSpec.model_validate(body.get("spec") or {})
    key = (namespace, name)
    report = StatusWriter(runtime, body)
    checkout = await until_stopped(stopped, bind(runtime, dict(body), spec, status, report))
    if checkout is None:
        return
    # From here the lease's agent is returned by whichever comes first: this daemon (expiry,
    # a lost agent) or the lease's deletion (lease_release).
    runtime.leases.held[key] = checkout
    if stopped:
        _stop(runtime, key, stopped)
        return
    now = time.time()
    hold = binding.hold_of(status, checkout.agent, ttl_seconds=spec.ttl_seconds, now=now)
    await announce(body, spec, status, report, checkout=checkout, hold=hold, now=now)
    if not await held_until_end(runtime, key, stopped, checkout=checkout, expires=hold.expires):
        return
    await end_lease(runtime, body, spec, report, checkout=checkout)


async def announce(
    body: kopf.Body,
    spec: AgentLeaseSpec,
    status: dict[str, Any],
    report: Report,
    *,
    checkout: Checkout,
    hold: binding.Hold,
    now: float,
) -> None:
    """Write the Bound status when it is not written yet, and post an Event for a new binding."""
    pool = spec.pool_ref.name
    if hold.needs_report(status):
        # Bound now, or before a restart by an operator that wrote no conditions.
        await report(
            leases.bound_status(
                pool=pool,
                agent=checkout.agent,
                endpoint=checkout.endpoint,
                token_secret_ref={"name": token_secret_name(pool), "key": TOKEN_KEY},
                bound_time=hold.bound_time or format_time(now),
                expire_time=format_time(hold.expires),
            )
        )
    if not hold.resumed:
        kopf.event(
            body,
            type="Normal",
            reason=str(EventReason.LEASE_BOUND),
            message=f"Bound agent {checkout.agent} until {format_time(hold.expires)}",
        )


async def held_until_end(
    runtime: Runtime,
    key: PoolKey,
    stopped: kopf.DaemonStopped,
    *,
    checkout: Checkout,
    expires: float,
) -> bool:
    """Hold the agent until the lease expires or the agent is lost; True when this daemon is
    the one to return it (not stopped, and the deletion handler did not take it)."""
    lost = asyncio.ensure_future(checkout.wait_lost())
    stop = asyncio.ensure_future(stopped.wait(max(0.0, expires - time.time())))
    try:
        await asyncio.wait({lost, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        lost.cancel()
        stop.cancel()
        if stopped:
            _stop(runtime, key, stopped)
    return not stopped and runtime.leases.held.pop(key, None) is checkout


async def end_lease(
    runtime: Runtime,
    body: kopf.Body,
    spec: AgentLeaseSpec,
    report: Report,
    *,
    checkout: Checkout,
) -> None:
    """The lease expired or lost its agent: say so, then give the agent back."""
    namespace, pool = str(body["metadata"].get("namespace") or ""), spec.pool_ref.name
    try:
        # The status first, so the client stops calling the agent before it goes back.
        if checkout.is_lost:
            message = checkout.lost_reason or "the agent was lost"
            await report(_failed(str(Reason.AGENT_LOST), message))
            return
        message = (
            f"The lease passed its ttl of {spec.ttl_seconds}s; agent {checkout.agent} goes"
            f" back to pool {pool}"
        )
        await report(leases.ended_status("Expired", str(Reason.EXPIRED), message))
    finally:
        await release(runtime, pool=(namespace, pool), checkout=checkout)
    kopf.event(
        body,
        type="Normal",
        reason=str(EventReason.LEASE_EXPIRED),
        message=f"Returned agent {checkout.agent} to pool {pool}",
    )


async def lease_release(
    runtime: Runtime, /, body: kopf.Body, name: str, namespace: str | None, **_: Any
) -> None:
    """The lease is deleted: mark it Released, then give its agent back.

    Here rather than in the daemon, so the daemon stops at once when the lease is deleted and
    the agent's return (a reset, when the pool asks for one) is an ordinary handler that kopf
    waits for, as pool_drain is for a pool.
    """
    key = (namespace or "", name)
    checkout = runtime.leases.take(key)
    if checkout is None:
        return
    pool = AgentLeaseSpec.model_validate(body.get("spec") or {}).pool_ref.name
    message = f"The lease was deleted; agent {checkout.agent} goes back to pool {pool}"
    try:
        # First, so a client watching the lease stops calling the agent at once.
        await StatusWriter(runtime, body)(
            leases.ended_status("Released", str(Reason.RELEASED), message)
        )
    finally:
        await release(runtime, pool=(key[0], pool), checkout=checkout)
    kopf.event(
        body,
        type="Normal",
        reason=str(EventReason.LEASE_RELEASED),
        message=f"Lease deleted: returned agent {checkout.agent} to pool {pool}",
    )


def _stop(runtime: Runtime, key: PoolKey, stopped: kopf.DaemonStopped) -> None:
    """The daemon is stopped while the lease holds an agent. A deleted lease leaves the agent to
    its deletion handler; otherwise (the operator stops) the lease stays Bound and the next
    daemon, in this operator or the next, takes the same agent up again."""
    reason = stopped.reason
    if reason is not None and reason & kopf.DaemonStoppingReason.RESOURCE_DELETED:
        return
    runtime.leases.park(key)


async def until_stopped(stopped: kopf.DaemonStopped, work: Awaitable[T]) -> T | None:
    """What ``work`` gives, or None once the daemon is stopped first (``work`` is cancelled then:
    a checkout cancelled after an agent was handed to it gives the agent back)."""
    task = asyncio.ensure_future(work)
    stop = asyncio.ensure_future(stopped.wait())
    try:
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
    return None if task.cancelled() else task.result()


async def release(runtime: Runtime, *, pool: tuple[str, str], checkout: Checkout) -> None:
    """Give a lease's agent back to its pool, if the pool is still served."""
    handle = runtime.pools.get(pool)
    if handle is not None:
        await asyncio.shield(return_agent(runtime, handle, checkout, CheckinOutcome.SUCCESS))


async def bind(
    runtime: Runtime,
    lease: dict[str, Any],
    spec: AgentLeaseSpec,
    status: dict[str, Any],
    report: Report,
) -> Checkout | None:
    """The agent for the lease: the one it held before a restart, else a new checkout.

    Reports Failed (PoolNotFound, AgentLost, PoolFull, CheckoutTimeout) and returns None when
    none can be had.
    """
    namespace, name = lease["metadata"]["namespace"], lease["metadata"]["name"]
    pool = spec.pool_ref.name
    try:
        pool_spec = (await runtime.kube.get_custom("agentpools", namespace, pool)).get("spec")
    except NotFound:
        message = f'AgentPool "{pool}" not found in namespace "{namespace}"'
        await report(_failed(str(Reason.POOL_NOT_FOUND), message))
        return None
    timeout = float(spec.effective_checkout_timeout(AgentPoolSpec.model_validate(pool_spec or {})))
    handle = await runtime.pools.wait((namespace, pool), timeout)
    if handle is None:
        message = f'AgentPool "{pool}" is not served by the operator after {timeout:g}s'
        await report(_failed(str(Reason.POOL_NOT_FOUND), message))
        return None
    restored = runtime.leases.restored.pop((namespace, name), None)
    if restored is not None:
        return restored
    if status.get("agent"):
        # The lease was bound before a restart and its agent did not come back with the pool.
        message = f"agent {status['agent']} of this lease is gone; create a new lease"
        await report(_failed(str(Reason.AGENT_LOST), message))
        return None
    if binding.needs_pending_report(status):
        await report(leases.pending_status(pool))
    holder = f"lease:{namespace}/{name}"
    try:
        return await handle.broker.checkout(
            timeout=timeout if spec.wait else 0.0, priority=spec.priority, holder=holder
        )
    except PoolExhausted as error:
        await report(_failed(binding.failure_reason(waited=spec.wait), str(error)))
    except PoolClosed as error:
        await report(_failed(str(Reason.POOL_NOT_FOUND), str(error)))
    return None
