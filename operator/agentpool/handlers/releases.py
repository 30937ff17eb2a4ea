"""Ending an AgentLease: its binding closed, its status said, its agent given back, in that order.

The lease daemon (:mod:`agentpool.handlers.leases`) calls :func:`end_lease` once the lease's term
passed, its agent was lost or a renewal failed; kopf calls :func:`lease_release` when the lease
is deleted, and :func:`stopped_with` settles an agent the daemon got just as it was stopped.
Each closes the binding first (``POST /unbind``, the lease's Secret deleted,
:mod:`agentpool.handlers.binds`), so the lease's token stops working before anything else, then
clears from status what a client could reach the agent with, then returns the agent: back to
the idle set when the unbind (which resets it) answered, retired when it failed or got no answer.
"""

from __future__ import annotations

from typing import Any

import kopf

from agentpool.api import AgentLeaseSpec
from agentpool.api.reasons import EventReason, Reason
from agentpool.broker import CheckinOutcome
from agentpool.handlers import binds, leasestatus
from agentpool.handlers.runtime import Runtime
from agentpool.pool import binding, leases


async def end_lease(
    runtime: Runtime,
    body: kopf.Body,
    held: binds.Binding,
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
        outcome = await binds.close_binding(runtime, held.key, pool, checkout)
        try:
            # Before the agent goes back, so the client stops calling it first.
            phase: leases.EndPhase = "Expired" if reason == Reason.EXPIRED else "Failed"
            await report(leases.ended_status(phase, reason, message))
        finally:
            binds.give_back(runtime, held.pool_key, checkout, outcome)
    if reason == Reason.EXPIRED:
        kopf.info(
            body,
            reason=str(EventReason.LEASE_EXPIRED),
            message=f"Returned agent {checkout.agent} to pool {pool}",
        )


async def lease_release(
    runtime: Runtime, /, body: kopf.Body, name: str, namespace: str | None, **_: Any
) -> None:
    """The lease is deleted: close its binding, mark it Released, then give its agent back.

    Here rather than in the daemon, so the daemon stops at once when the lease is deleted and
    the agent's return (its unbind) is an ordinary handler that kopf waits for, as pool_drain is
    for a pool.
    """
    key = (namespace or "", name)
    pool = AgentLeaseSpec.model_validate(body.get("spec") or {}).pool_ref.name
    async with runtime.leases.lock(key):
        # Under the lock: a bind still in flight has answered, and its agent is held.
        checkout = runtime.leases.take(key)
        if checkout is None:
            return
        outcome = await binds.close_binding(runtime, key, pool, checkout)
        message = f"The lease was deleted; agent {checkout.agent} goes back to pool {pool}"
        try:
            # First, so a client watching the lease stops calling the agent at once.
            await leasestatus.StatusWriter(runtime, body)(
                leases.ended_status("Released", str(Reason.RELEASED), message)
            )
        finally:
            binds.give_back(runtime, (key[0], pool), checkout, outcome)
    runtime.leases.forget(key)
    kopf.info(
        body,
        reason=str(EventReason.LEASE_RELEASED),
        message=f"Lease deleted: returned agent {checkout.agent} to pool {pool}",
    )


async def stopped_with(
    runtime: Runtime, held: binds.Binding, stopped: kopf.DaemonStopped, *, bound: bool
) -> None:
    """The daemon was stopped as it got its agent. A deleted lease gives it back itself (its
    deletion handler found none held): unbound first if it was bound before a restart. An
    operator that stops leaves it for the next daemon."""
    reason = stopped.reason
    if reason is None or not reason & kopf.DaemonStoppingReason.RESOURCE_DELETED:
        runtime.leases.restored[held.key] = held.checkout
        return
    outcome = CheckinOutcome.UNUSED
    if bound:
        outcome = await binds.close_binding(runtime, held.key, held.pool, held.checkout)
    binds.give_back(runtime, held.pool_key, held.checkout, outcome)
