"""Ending an AgentLease: its binding closed, its status said, its agent given back, in that order.

A lease's task (:mod:`agentpool.handlers.leases`) calls :func:`end_lease` once the lease's term
passed, its agent was lost or a renewal failed; the lease's deletion event calls
:func:`lease_release`, and :func:`stopped_with` settles an agent a task got just as it was
stopped. Each closes the binding first (``POST /unbind``, :mod:`agentpool.handlers.binds`), so
the lease's token stops working before anything else, then (for a lease that is still there)
clears from status what a client could reach the agent with, then returns the agent: back to
the idle set when the unbind (which resets it) answered, retired when it failed or got no answer.
"""

from __future__ import annotations

from agentpool.api import AgentLeaseSpec, parse_spec
from agentpool.api.raw import RawBody, uid_of
from agentpool.api.reasons import EventReason, Reason
from agentpool.handlers import binds, leasestatus
from agentpool.handlers.runtime import LeaseStop, ObjectKey, Runtime
from agentpool.pool import binding, leases
from agentpool.pool.checkin import CheckinOutcome


async def end_lease(
    runtime: Runtime,
    body: RawBody,
    held: binds.LeaseBinding,
    report: leasestatus.Report,
    failure: binding.BindFailure | None,
) -> None:
    """The lease expired, lost its agent or failed a renewal: close the binding, say so, then
    give the agent back."""
    checkout, pool = held.checkout, held.pool
    if checkout.is_lost:
        reason, message = str(Reason.AGENT_LOST), checkout.lost_reason or "the agent was lost"
    elif failure is not None:
        reason, message = failure.reason, failure.message
    else:
        reason = str(Reason.EXPIRED)
        message = (
            f"The lease passed its term ({held.term.ttl_seconds:g}s after it was bound or last"
            f" renewed); agent {checkout.agent} goes back to pool {pool}"
        )
    async with runtime.leases.lock(held.key):
        # An unbind or a Secret delete that fails leaves the agent possibly holding the
        # lease's token: it is retired, never handed out again.
        outcome = CheckinOutcome.RESET_FAILED
        try:
            outcome = await binds.close_binding(runtime, held.key, pool, checkout)
            # Before the agent goes back, so the client stops calling it first.
            phase: leases.EndPhase = "Expired" if reason == Reason.EXPIRED else "Failed"
            await report(leases.ended_status(phase, reason, message))
        finally:
            binds.give_back(runtime, held.pool_key, checkout, outcome)
    if reason == Reason.EXPIRED:
        leasestatus.post_event(
            runtime,
            held.pool_key,
            str(EventReason.LEASE_EXPIRED),
            f"Lease {held.key[1]} passed its term: agent {checkout.agent} went back to the pool",
        )


async def lease_release(runtime: Runtime, body: RawBody, key: ObjectKey) -> None:
    """The lease is deleted: its task stops, then its binding is closed and its agent goes back.

    The lease carries no finalizer, so it is gone already: nothing is written to it, and its
    Secret, which it owns, goes with it by garbage collection. The unbind takes the token back
    from the agent, so the token stops working there whether or not the Secret is gone yet.
    """
    current = runtime.leases.latest.get(key)
    if current is not None and uid_of(current) != uid_of(body):
        # A lease of that name deleted before the one held now was made: the one held was
        # told apart by its uid when it appeared, and the deleted one released then.
        return
    running = runtime.leases.tasks.get(key)
    if running is not None:
        running.stop.set(deleted=True)
    pool = parse_spec(AgentLeaseSpec, body.get("spec")).pool_ref.name
    async with runtime.leases.lock(key):
        # Under the lock: a bind still in flight has answered, and its agent is held.
        checkout = runtime.leases.take(key)
        if checkout is not None:
            outcome = await binds.close_binding(runtime, key, pool, checkout, delete_secret=False)
            binds.give_back(runtime, (key[0], pool), checkout, outcome)
    # Whether or not it held an agent, nothing of the lease stays behind.
    runtime.leases.forget(key)


async def stopped_with(
    runtime: Runtime, held: binds.LeaseBinding, stop: LeaseStop, *, bound: bool
) -> None:
    """The task was stopped as it got its agent. A deleted lease's gives it back itself (the
    deletion found none held): unbound first if it was bound before a restart. An operator
    that stops leaves it for the next task."""
    if not stop.deleted:
        runtime.leases.restored[held.key] = held.checkout
        return
    outcome = CheckinOutcome.UNUSED
    if bound:
        outcome = await binds.close_binding(runtime, held.key, held.pool, held.checkout)
    binds.give_back(runtime, held.pool_key, held.checkout, outcome)
