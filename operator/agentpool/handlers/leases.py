"""The AgentLease controller: one warm agent held for a client, returned on delete or expiry.

A kopf daemon per lease checks an agent out of the pool's broker (queueing, or failing at once
with PoolFull when ``wait`` is false), binds it to the lease (the lease's own token, handed over
by :mod:`agentpool.handlers.binds`), writes where to reach it and which Secret holds that token
(each status, with its conditions, as :mod:`agentpool.pool.leases` gives it), and holds it while
the holder renews ``spec.renewTime`` until its term passes; a deleted lease's agent goes back in
its deletion handler, so the daemon ends as soon as kopf stops it. Either way the binding is
closed first (``POST /unbind``, the Secret deleted). A restarted operator's pool loop takes a
Bound lease's agent back before serving anyone, and the lease daemon picks it up. What to wait
for and until when is :mod:`agentpool.pool.binding`'s to decide; :func:`register` binds the
module-level handlers to kopf.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

import kopf

from agentpool.api import AgentLeaseSpec, AgentPoolSpec
from agentpool.api.conditions import format_time
from agentpool.api.reasons import EventReason, Reason
from agentpool.broker import CheckinOutcome, Checkout, PoolClosed, PoolExhausted
from agentpool.broker.registry import PoolKey
from agentpool.handlers import binds, leasestatus, releases
from agentpool.handlers.leasestatus import Report, StatusWriter, failed_status
from agentpool.handlers.registration import KindHandlers
from agentpool.handlers.runtime import Runtime
from agentpool.io.kube import NotFound
from agentpool.pool import binding, leases
from agentpool.pool.manifests import lease_token_secret_name

TERMINAL = frozenset({"Released", "Expired", "Failed"})

T = TypeVar("T")


def register(registry: kopf.OperatorRegistry, runtime: Runtime) -> None:
    """Bind the AgentLease handlers to ``registry``, each given ``runtime``."""
    handlers = KindHandlers("agentleases", registry, runtime)
    handlers.on_event(lease_event)
    # The daemon ends by itself as soon as it is stopped (a deleted lease's agent goes back in
    # lease_release), so kopf never needs to cancel it.
    handlers.daemon(lease_loop, cancellation_backoff=runtime.settings.leases.stop_seconds)
    handlers.on_delete(releases.lease_release)


async def lease_event(runtime: Runtime, /, name: str, namespace: str | None, **_: Any) -> None:
    """The lease changed (its holder renewed it, say): the daemon holding its agent looks again
    (kopf's daemon body is live, so it reads the change there)."""
    wake = runtime.leases.wakes.get((namespace or "", name))
    if wake is not None:
        wake.set()


def renew_time_of(body: kopf.Body) -> str | None:
    """The lease's ``spec.renewTime``, as its holder wrote it."""
    return (body.get("spec") or {}).get("renewTime") or None


async def lease_loop(
    runtime: Runtime,
    /,
    body: kopf.Body,
    name: str,
    namespace: str | None,
    stopped: kopf.DaemonStopped,
    **_: Any,
) -> None:
    """The lease's daemon: bind an agent, hold it while renewed until its term passes or it is
    lost, then return it; a stopped daemon leaves it to the deletion handler or the next daemon."""
    if (body.get("status") or {}).get("phase") in TERMINAL:
        return
    key = (namespace or "", name)
    report = StatusWriter(runtime, body)
    try:
        held = await take_agent(runtime, body, key, stopped, report)
        if held is None:
            return
        failure = await hold_agent(runtime, body, held, stopped, report)
        if not stopped and runtime.leases.held.pop(key, None) is held.checkout:
            await releases.end_lease(runtime, body, held, report, failure)
    finally:
        runtime.leases.forget(key)


async def take_agent(
    runtime: Runtime,
    body: kopf.Body,
    key: PoolKey,
    stopped: kopf.DaemonStopped,
    report: Report,
) -> binds.Binding | None:
    """The lease's agent, bound to it (or still bound from before a restart) and reported
    Bound; None when the lease cannot have one (reported Failed) or the daemon stopped."""
    spec = AgentLeaseSpec.model_validate(body.get("spec") or {})
    status = dict(body.get("status") or {})
    too_large = None if status.get("agent") else binding.oversized_context(spec.context)
    if too_large is not None:
        await report(failed_status(str(Reason.CONTEXT_TOO_LARGE), too_large))
        return None
    work = checkout_agent(runtime, dict(body), spec, status, report)
    checkout = await until_stopped(stopped, work)
    if checkout is None:
        return None
    held, hold = binding_of(body, key, spec, status, checkout)
    async with runtime.leases.lock(key):
        # Under the lock: a deletion handler that found no agent held has run by now, or will
        # find this one once the binding is open.
        if stopped:
            await releases.stopped_with(runtime, held, stopped, bound=hold.resumed)
            return None
        try:
            failure = None if hold.resumed else await open_binding(runtime, dict(body), held)
        except BaseException:
            # Its Secret could not be written, or the daemon was cancelled mid-bind: the
            # agent may hold the lease's token, so it is retired rather than handed out again.
            binds.give_back(runtime, held.pool_key, checkout, CheckinOutcome.RESET_FAILED)
            raise
        if failure is None:
            runtime.leases.held[key] = checkout
            await announce(body, spec, status, report, held=held, hold=hold)
            return held
    await binds.give_back_failed(runtime, held.pool_key, checkout, failure)
    await report(failed_status(failure.reason, failure.message))
    return None


def binding_of(
    body: kopf.Body,
    key: PoolKey,
    spec: AgentLeaseSpec,
    status: dict[str, Any],
    checkout: Checkout,
) -> tuple[binds.Binding, binding.Hold]:
    """The binding to open (or resume) for the agent just checked out, with its term."""
    hold = binding.hold_of(
        status,
        checkout.agent,
        secret=lease_token_secret_name(key[1]),
        ttl_seconds=spec.ttl_seconds,
        renew_time=renew_time_of(body),
        now=time.time(),
    )
    expire_time = hold.expire_time or format_time(hold.term.expires)
    held = binds.Binding(
        key, spec.pool_ref.name, checkout, "", spec.context, hold.term, expire_time
    )
    return held, hold


async def open_binding(
    runtime: Runtime, lease: dict[str, Any], held: binds.Binding
) -> binding.BindFailure | None:
    """Bind the agent to the lease; why not, when its pool stopped being served meanwhile."""
    handle = runtime.pools.get(held.pool_key)
    if handle is None:
        message = f'AgentPool "{held.pool}" is no longer served by the operator'
        return binding.BindFailure(str(Reason.POOL_NOT_FOUND), message, "unused")
    return await binds.open_binding(runtime, handle, lease, held)


async def announce(
    body: kopf.Body,
    spec: AgentLeaseSpec,
    status: dict[str, Any],
    report: Report,
    *,
    held: binds.Binding,
    hold: binding.Hold,
) -> None:
    """Write the Bound status when it is not written yet, and post an Event for a new binding."""
    if hold.needs_report(status):
        # Bound now, or before a restart by an operator that wrote no conditions.
        await report(
            leasestatus.bound_status(held, hold.bound_time or format_time(held.term.bound))
        )
    if not hold.resumed:
        kopf.info(
            body,
            reason=str(EventReason.LEASE_BOUND),
            message=f"Bound agent {held.checkout.agent} until {held.expire_time}",
        )


async def hold_agent(
    runtime: Runtime,
    body: kopf.Body,
    held: binds.Binding,
    stopped: kopf.DaemonStopped,
    report: Report,
) -> binding.BindFailure | None:
    """Hold the agent while the holder renews, until the term passes, the agent is lost, a
    renewal fails (returned) or the daemon stops (the lease's agent then parked, or left to the
    deletion handler)."""
    wake = runtime.leases.wake(held.key)
    failure = None
    while not stopped and not held.checkout.is_lost:
        wake.clear()
        now = time.time()
        held.term = held.term.renew(renew_time_of(body), seen=now)
        expire_time = format_time(held.term.expires)
        if expire_time != held.expire_time:
            failure = await renew(runtime, body, held, expire_time, report)
            if failure is not None:
                break
        if now >= held.term.expires:
            break
        await wait_any(held.checkout, stopped, wake, held.term.expires - now)
    if stopped:
        _stop(runtime, held.key, stopped)
    return failure


async def renew(
    runtime: Runtime, body: kopf.Body, held: binds.Binding, expire_time: str, report: Report
) -> binding.BindFailure | None:
    """Give the agent the renewed expiry and say so in status; why not, if it refused."""
    handle = runtime.pools.get(held.pool_key)
    async with runtime.leases.lock(held.key):
        if handle is None or runtime.leases.held.get(held.key) is not held.checkout:
            return None
        failure = await binds.renew_binding(runtime, handle, dict(body), held, expire_time)
        if failure is None:
            bound_time = (body.get("status") or {}).get("boundTime")
            await report(leasestatus.bound_status(held, bound_time or format_time(held.term.bound)))
        return failure


async def wait_any(
    checkout: Checkout, stopped: kopf.DaemonStopped, wake: asyncio.Event, timeout: float
) -> None:
    """Until the agent is lost, the daemon is stopped, the lease changes, or ``timeout``."""
    waits = {
        asyncio.ensure_future(checkout.wait_lost()),
        asyncio.ensure_future(stopped.wait()),
        asyncio.ensure_future(wake.wait()),
    }
    try:
        await asyncio.wait(waits, timeout=max(0.0, timeout), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()


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


async def checkout_agent(
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
        await report(failed_status(str(Reason.POOL_NOT_FOUND), message))
        return None
    timeout = float(spec.effective_checkout_timeout(AgentPoolSpec.model_validate(pool_spec or {})))
    handle = await runtime.pools.wait((namespace, pool), timeout)
    if handle is None:
        message = f'AgentPool "{pool}" is not served by the operator after {timeout:g}s'
        await report(failed_status(str(Reason.POOL_NOT_FOUND), message))
        return None
    restored = runtime.leases.restored.pop((namespace, name), None)
    if restored is not None:
        return restored
    if status.get("agent"):
        # The lease was bound before a restart and its agent did not come back with the pool.
        message = f"agent {status['agent']} of this lease is gone; create a new lease"
        await report(failed_status(str(Reason.AGENT_LOST), message))
        return None
    if binding.needs_pending_report(status) and not handle.broker.serves_at_once(whole=True):
        # Only a lease that waits says so: one served at once goes straight to Bound.
        await report(leases.pending_status(pool))
    holder = f"lease:{namespace}/{name}"
    try:
        return await handle.broker.checkout(
            timeout=timeout if spec.wait else 0.0,
            priority=spec.priority,
            holder=holder,
            whole=True,
        )
    except PoolExhausted as error:
        await report(failed_status(binding.failure_reason(waited=spec.wait), str(error)))
    except PoolClosed as error:
        await report(failed_status(str(Reason.POOL_NOT_FOUND), str(error)))
    return None
