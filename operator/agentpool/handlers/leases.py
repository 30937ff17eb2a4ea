"""The AgentLease controller: one warm agent held for a client, returned on delete or expiry.

Every watch event of a lease comes to :func:`lease_event`. A new lease gets a task of its own
(:func:`lease_task`) that checks an agent out of the pool's broker (queueing, or failing at once
with PoolFull when ``wait`` is false), binds it to the lease (the lease's own token, handed over
by :mod:`agentpool.handlers.binds`), writes where to reach it and which Secret holds that token
(each status, with its conditions, as :mod:`agentpool.pool.leases` gives it), and holds it while
the holder renews ``spec.renewTime`` until its term passes. A deleted lease's task is stopped and
its agent goes back from the deletion event (:mod:`agentpool.handlers.releases`): leases carry
no finalizer and kopf keeps no state on them, so a lease costs its create, its Secret, one status
write and its delete. Either way the binding is closed first (``POST /unbind``). A restarted
operator's pool loop takes a Bound lease's agent back before serving anyone, for the lease's
new task to pick up, and unbinds an agent whose lease went meanwhile. A deletion the watch
missed is found by :func:`sweep_once`, or by the lease made again under its name (another uid)
when the watch shows that first. What to wait for and until when is
:mod:`agentpool.pool.binding`'s to decide. An operator acting alone hands it the events of its
own watch (:mod:`agentpool.handlers.leasewatch`); one with peers has :func:`register` bind it to
kopf, which pauses its watches while a peer acts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

import kopf

from agentpool.api import AgentLeaseSpec, AgentLeaseStatus, parse_spec
from agentpool.api.conditions import format_time
from agentpool.api.raw import RawBody, raw_body, uid_of
from agentpool.api.reasons import EventReason, Reason
from agentpool.broker import Checkout
from agentpool.handlers import binds, leasestatus, releases, replicas, serving
from agentpool.handlers.leasestatus import Report, StatusWriter, failed_status
from agentpool.handlers.registration import KindHandlers
from agentpool.handlers.runtime import LeaseStop, LeaseTask, ObjectKey, PoolHandle, Runtime
from agentpool.pool import binding, leases
from agentpool.pool.checkin import CheckinOutcome, CheckoutTimedOut, PoolClosed, PoolNotFound
from agentpool.pool.manifests import lease_token_secret_name

TERMINAL = frozenset({"Released", "Expired", "Failed"})

T = TypeVar("T")

log = logging.getLogger(__name__)


def register(registry: kopf.OperatorRegistry, runtime: Runtime) -> None:
    """Bind the AgentLease handler to ``registry``, given ``runtime``."""
    KindHandlers("agentleases", registry, runtime).on_event(lease_event)


async def lease_event(
    runtime: Runtime,
    /,
    type: str | None,
    body: Mapping[str, Any],
    name: str,
    namespace: str | None,
    **_: Any,
) -> None:
    """A lease appeared, changed or went: a new one gets its task, a changed one (its holder
    renewed it) wakes it, a deleted one's task stops and its agent goes back."""
    key, lease = (namespace or "", name), raw_body(body)
    if type == "DELETED" and await replicas.moved(runtime, "agentleases", lease):
        # Not deleted: relabelled to the replica its pool went to, which takes it up, Bound.
        running = runtime.leases.tasks.get(key)
        if running is not None:
            running.stop.set(deleted=False)
        return
    if type == "DELETED":
        await releases.lease_release(runtime, lease, key)
        return
    running = runtime.leases.tasks.get(key)
    if running is not None and not running.task.done() and not running.stop:
        seen = runtime.leases.latest.get(key)
        if seen is None or uid_of(seen) == uid_of(lease):
            runtime.leases.latest[key] = lease
            runtime.leases.wake(key).set()
            return
        # Made again under its name while the watch missed the deletion: the lease held is
        # gone, and is released as its deletion would have released it.
        await releases.lease_release(runtime, seen, key)
        running = runtime.leases.tasks.get(key)
    if leases.stored_status(lease.get("status")).phase in TERMINAL:
        # Nothing to hold: an ended lease is remembered nowhere.
        return
    runtime.leases.latest[key] = lease
    # A task still ending (of a lease deleted just before this one was made under its name)
    # ends before the new one starts.
    before = None if running is None or running.task.done() else running.task
    stop = LeaseStop()
    task = asyncio.create_task(lease_task(runtime, key, stop, after=before))
    runtime.leases.tasks[key] = LeaseTask(task, stop)


async def lease_task(
    runtime: Runtime, key: ObjectKey, stop: LeaseStop, *, after: asyncio.Task[None] | None = None
) -> None:
    """Run the lease's loop on the lease as last seen; after an error (an API write refused,
    say), again 2 s later, until it ends or is stopped."""
    if after is not None:
        await asyncio.wait({after})
    try:
        while not stop:
            body = runtime.leases.latest.get(key)
            if body is None:
                return
            try:
                await lease_loop(runtime, body, key, stop)
                return
            except Exception:
                log.exception("lease %s/%s: its task failed; trying again in 2 s", *key)
                # An agent it holds (bound, perhaps without its Bound status written) is the
                # next try's to take up again, never a second checkout's beside it.
                runtime.leases.park(key)
                await until_stopped(stop, runtime.clock.sleep(2.0))
    finally:
        entry = runtime.leases.tasks.get(key)
        if entry is not None and entry.stop is stop:
            del runtime.leases.tasks[key]
            runtime.leases.latest.pop(key, None)


async def sweep(runtime: Runtime, every: float) -> None:
    """:func:`sweep_once` every ``every`` seconds while the operator runs."""
    while True:
        await asyncio.sleep(every)
        try:
            await sweep_once(runtime)
        except Exception as error:  # the API server away: the next sweep looks again
            log.warning("sweeping the leases failed: %s", error)


async def sweep_once(runtime: Runtime) -> None:
    """Release the leases whose deletion the watch missed (a watch lists again after a broken
    watch, and a listing names no deleted object): those a running task holds that a listing
    of their namespace, made after the watch showed them, no longer shows."""
    held = {
        key: uid_of(runtime.leases.latest.get(key) or {})
        for key, entry in runtime.leases.tasks.items()
        if not entry.task.done() and not entry.stop
    }
    for namespace in sorted({key[0] for key in held}):
        listed = await runtime.kube.list_custom("agentleases", namespace)
        present = {uid_of(lease) for lease in listed}
        for key, uid in held.items():
            if key[0] != namespace or uid in present:
                continue
            body = runtime.leases.latest.get(key)
            if body is not None and uid_of(body) == uid:
                log.info("lease %s/%s is gone though no deletion was seen: releasing it", *key)
                await releases.lease_release(runtime, body, key)


def renew_time_of(body: RawBody) -> str | None:
    """The lease's ``spec.renewTime``, as its holder wrote it."""
    return (body.get("spec") or {}).get("renewTime") or None


async def lease_loop(runtime: Runtime, body: RawBody, key: ObjectKey, stop: LeaseStop) -> None:
    """Bind an agent, hold it while renewed until its term passes or it is lost, then return
    it; a stopped task leaves it to the lease's deletion or the next task."""
    report = StatusWriter(runtime, body)
    try:
        held = await take_agent(runtime, body, key, stop, report)
        if held is None:
            return
        failure = await hold_agent(runtime, body, held, stop, report)
        if not stop and runtime.leases.held.pop(key, None) is held.checkout:
            await releases.end_lease(runtime, body, held, report, failure)
    finally:
        runtime.leases.forget(key)


async def take_agent(
    runtime: Runtime,
    body: RawBody,
    key: ObjectKey,
    stop: LeaseStop,
    report: Report,
) -> binds.LeaseBinding | None:
    """The lease's agent, bound to it (or still bound from before a restart) and reported
    Bound; None when the lease cannot have one (reported Failed) or its task stopped."""
    spec = parse_spec(AgentLeaseSpec, body.get("spec"))
    status = leases.stored_status(body.get("status"))
    if status.phase in TERMINAL:
        # Ended (a retry took up the lease as its own end came back on the watch).
        return None
    too_large = None if status.agent else binding.oversized_context(spec.context)
    if too_large is not None:
        await report(failed_status(str(Reason.CONTEXT_TOO_LARGE), too_large))
        return None
    work = checkout_agent(runtime, body, spec, status, report)
    checkout = await until_stopped(stop, work)
    if checkout is None:
        return None
    held, hold = binding_of(body, key, spec, status, checkout, now=runtime.clock.now())
    async with runtime.leases.lock(key):
        # Under the lock: a deletion handler that found no agent held has run by now, or will
        # find this one once the binding is open.
        if stop:
            await releases.stopped_with(runtime, held, stop, bound=hold.resumed)
            return None
        try:
            failure = None if hold.resumed else await open_binding(runtime, body, held)
        except BaseException:
            # Its Secret could not be written, or the task was cancelled mid-bind: the
            # agent may hold the lease's token, so it is retired rather than handed out again.
            binds.give_back(runtime, held.pool_key, checkout, CheckinOutcome.RESET_FAILED)
            raise
        if failure is None:
            runtime.leases.held[key] = checkout
            if stop.deleted:
                # Deleted as the agent took the bind: the deletion, waiting on the lock, takes
                # the agent back; the lease is gone, so there is nothing to say Bound on.
                return None
            await announce(runtime, body, spec, status, report, held=held, hold=hold)
            return held
    await binds.give_back_failed(runtime, held.pool_key, checkout, failure)
    await report(failed_status(failure.reason, failure.message))
    return None


def binding_of(
    body: RawBody,
    key: ObjectKey,
    spec: AgentLeaseSpec,
    status: AgentLeaseStatus,
    checkout: Checkout,
    *,
    now: float,
) -> tuple[binds.LeaseBinding, binding.Hold]:
    """The binding to open (or resume) for the agent just checked out at ``now``, with its
    term."""
    hold = binding.hold_of(
        status,
        checkout.agent,
        secret=lease_token_secret_name(key[1]),
        ttl_seconds=spec.ttl_seconds,
        renew_time=renew_time_of(body),
        now=now,
    )
    expire_time = hold.expire_time or format_time(hold.term.expires)
    held = binds.LeaseBinding(
        key, spec.pool_ref.name, checkout, "", spec.context, hold.term, expire_time
    )
    return held, hold


async def open_binding(
    runtime: Runtime, lease: RawBody, held: binds.LeaseBinding
) -> binding.BindFailure | None:
    """Bind the agent to the lease; why not, when its pool stopped being served meanwhile."""
    handle = runtime.pools.get(held.pool_key)
    if handle is None:
        message = f'AgentPool "{held.pool}" is no longer served by the operator'
        return binding.BindFailure(str(Reason.POOL_NOT_FOUND), message, "unused")
    return await binds.open_binding(runtime, handle, lease, held)


async def announce(
    runtime: Runtime,
    body: RawBody,
    spec: AgentLeaseSpec,
    status: AgentLeaseStatus,
    report: Report,
    *,
    held: binds.LeaseBinding,
    hold: binding.Hold,
) -> None:
    """Write the Bound status when it is not written yet, and post an Event for a new binding."""
    if hold.needs_report(status):
        # Bound now, or before a restart by an operator that wrote no conditions.
        await report(
            leasestatus.bound_status(held, hold.bound_time or format_time(held.term.bound))
        )
    if not hold.resumed:
        leasestatus.post_event(
            runtime,
            held.pool_key,
            str(EventReason.LEASE_BOUND),
            f"Bound agent {held.checkout.agent} to lease {held.key[1]} until {held.expire_time}",
        )


async def hold_agent(
    runtime: Runtime,
    body: RawBody,
    held: binds.LeaseBinding,
    stop: LeaseStop,
    report: Report,
) -> binding.BindFailure | None:
    """Hold the agent while the holder renews (as the lease was last seen on the watch), until
    the term passes, the agent is lost, a renewal fails (returned) or the task stops (the
    lease's agent then parked, or left to the lease's deletion)."""
    wake = runtime.leases.wake(held.key)
    failure = None
    while not stop and not held.checkout.is_lost:
        wake.clear()
        now = runtime.clock.now()
        body = runtime.leases.latest.get(held.key, body)
        held.term = held.term.renew(renew_time_of(body), seen=now)
        expire_time = format_time(held.term.expires)
        if expire_time != held.expire_time:
            failure = await renew(runtime, body, held, expire_time, report)
            if failure is not None:
                break
        if now >= held.term.expires:
            break
        await wait_any(held.checkout, stop, wake, runtime.clock.sleep(held.term.expires - now))
    if stop and not stop.deleted:
        # The operator stops: the lease stays Bound and the next task, in this operator or
        # the next, takes the same agent up again. A deleted lease's agent goes back from
        # its deletion.
        runtime.leases.park(held.key)
    return failure


async def renew(
    runtime: Runtime,
    body: RawBody,
    held: binds.LeaseBinding,
    expire_time: str,
    report: Report,
) -> binding.BindFailure | None:
    """Give the agent the renewed expiry and say so in status; why not, if it refused."""
    handle = runtime.pools.get(held.pool_key)
    async with runtime.leases.lock(held.key):
        if handle is None or runtime.leases.held.get(held.key) is not held.checkout:
            return None
        failure = await binds.renew_binding(runtime, handle, body, held, expire_time)
        if failure is None:
            bound_time = leases.stored_status(body.get("status")).bound_time
            await report(leasestatus.bound_status(held, format_time(bound_time or held.term.bound)))
        return failure


async def wait_any(
    checkout: Checkout, stop: LeaseStop, wake: asyncio.Event, timer: Awaitable[None]
) -> None:
    """Until the agent is lost, the task is stopped, the lease changes, or ``timer`` (a sleep
    on the runtime's clock) ends."""
    waits = {
        asyncio.ensure_future(checkout.wait_lost()),
        asyncio.ensure_future(stop.wait()),
        asyncio.ensure_future(wake.wait()),
        asyncio.ensure_future(timer),
    }
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()


async def until_stopped(stop: LeaseStop, work: Awaitable[T]) -> T | None:
    """What ``work`` gives, or None once the task is stopped first (``work`` is cancelled then:
    a checkout cancelled after an agent was handed to it gives the agent back)."""
    task = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
    return None if task.cancelled() else task.result()


async def served_pool(
    runtime: Runtime, namespace: str, spec: AgentLeaseSpec, report: Report
) -> PoolHandle | None:
    """The lease's pool as the operator serves it (:mod:`agentpool.handlers.serving`), waited
    for within the lease's checkout timeout; None, reported PoolNotFound, when it does not exist
    or is not served in time. A paused operator serves no pool and writes nothing: the replica
    that acts serves the lease meanwhile, and this one looks again once it acts itself."""
    while True:
        await runtime.leases.acting.wait()
        try:
            handle = await serving.served_pool(
                runtime,
                namespace,
                spec.pool_ref.name,
                timeout=lambda pool: float(spec.effective_checkout_timeout(pool)),
            )
        except (PoolNotFound, serving.NotServed) as error:
            if runtime.leases.paused:
                continue
            await report(failed_status(str(Reason.POOL_NOT_FOUND), str(error)))
            return None
        if not runtime.leases.paused:
            return handle


async def checkout_agent(
    runtime: Runtime,
    lease: RawBody,
    spec: AgentLeaseSpec,
    status: AgentLeaseStatus,
    report: Report,
) -> Checkout | None:
    """The agent for the lease: the one it held before a restart, else a new checkout.

    Reports Failed (PoolNotFound, AgentLost, PoolFull, CheckoutTimeout) and returns None when
    none can be had.
    """
    namespace, name = lease["metadata"]["namespace"], lease["metadata"]["name"]
    pool = spec.pool_ref.name
    handle = await served_pool(runtime, namespace, spec, report)
    if handle is None:
        return None
    timeout = float(spec.effective_checkout_timeout(handle.spec))
    restored = runtime.leases.restored.pop((namespace, name), None)
    if restored is not None:
        return restored
    if status.agent:
        # The lease was bound before a restart and its agent did not come back with the pool.
        message = f"agent {status.agent} of this lease is gone; create a new lease"
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
    except CheckoutTimedOut as error:
        await report(failed_status(binding.failure_reason(waited=spec.wait), str(error)))
    except PoolClosed as error:
        await report(failed_status(str(Reason.POOL_NOT_FOUND), str(error)))
    return None
