"""The AgentLease controller: one warm agent held for a client, returned on delete or expiry.

A kopf daemon per lease checks an agent out of the pool's broker (queueing, or failing at once
with PoolFull when ``wait`` is false), writes where to reach it and which Secret holds its token,
and holds it until the lease is deleted or its ttl passes. The agent goes back through the same
path as a run's (reset between holders when the pool asks for it). A restarted operator's pool
loop takes a Bound lease's agent back before serving anyone, and the lease daemon picks it up.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import kopf

from agentpool import GROUP, VERSION
from agentpool.api import AgentLeaseSpec
from agentpool.api.reasons import EventReason, Reason
from agentpool.broker import Checkout, Outcome, PoolClosed, PoolExhausted
from agentpool.handlers.dispatch import return_agent
from agentpool.handlers.runtime import Runtime
from agentpool.io.kube import NotFound
from agentpool.pool.manifests import TOKEN_KEY, token_secret_name
from agentpool.pool.pods import epoch

TERMINAL = frozenset({"Released", "Expired", "Failed"})
DEFAULT_CHECKOUT_TIMEOUT = 30.0
AGENT_LOST = "AgentLost"
CHECKOUT_TIMEOUT = "CheckoutTimeout"

Report = Callable[[dict[str, Any]], Awaitable[None]]


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _failed(reason: str, message: str) -> dict[str, Any]:
    return {"phase": "Failed", "reason": reason, "message": message}


def register(registry: kopf.OperatorRegistry, runtime: Runtime) -> None:
    @kopf.daemon(
        GROUP,
        VERSION,
        "agentleases",
        id="lease_loop",
        registry=registry,
        backoff=2,
        cancellation_timeout=10,
    )
    async def lease_loop(
        body: kopf.Body, name: str, namespace: str | None, stopped: kopf.DaemonStopped, **_: Any
    ) -> None:
        namespace = namespace or ""
        status = dict(body.get("status") or {})
        if status.get("phase") in TERMINAL:
            return
        spec = AgentLeaseSpec.model_validate(body.get("spec") or {})
        pool = spec.pool_ref.name

        async def report(patch: dict[str, Any]) -> None:
            with contextlib.suppress(NotFound):
                await runtime.kube.patch_status("agentleases", namespace, name, patch)

        checkout = await bind(runtime, dict(body), spec, status, report)
        if checkout is None:
            return
        bound = status.get("phase") == "Bound" and status.get("agent") == checkout.agent
        expires = epoch(status.get("expireTime")) if bound else None
        if expires is None:
            expires = time.time() + spec.ttl_seconds
            await report(
                {
                    "phase": "Bound",
                    "agent": checkout.agent,
                    "endpoint": checkout.endpoint,
                    "tokenSecretRef": {"name": token_secret_name(pool), "key": TOKEN_KEY},
                    "boundTime": _iso(time.time()),
                    "expireTime": _iso(expires),
                    "reason": str(Reason.BOUND),
                    "message": f"Agent {checkout.agent} of pool {pool} is held for this lease",
                }
            )
            kopf.event(
                body,
                type="Normal",
                reason=str(EventReason.LEASE_BOUND),
                message=f"Bound agent {checkout.agent} until {_iso(expires)}",
            )
        keep = False
        try:
            lost = asyncio.ensure_future(checkout.wait_lost())
            stop = asyncio.ensure_future(stopped.wait(max(0.0, expires - time.time())))
            try:
                await asyncio.wait({lost, stop}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                lost.cancel()
                stop.cancel()
            if checkout.is_lost:
                await report(_failed(AGENT_LOST, checkout.lost_reason or "the agent was lost"))
                return
            reason = stopped.reason
            if reason is not None and not reason & kopf.DaemonStoppingReason.RESOURCE_DELETED:
                # The operator is stopping (or the daemon restarting): the lease stays Bound and
                # the next daemon takes the same agent up again.
                keep = True
                return
            if reason is not None:
                # Deleted: the object is gone (a lease has no finalizer), so an Event says it.
                kopf.event(
                    body,
                    type="Normal",
                    reason=str(EventReason.LEASE_RELEASED),
                    message=f"Lease deleted: returned agent {checkout.agent} to pool {pool}",
                )
            elif not stopped:
                await report(
                    {
                        "phase": "Expired",
                        "reason": str(Reason.EXPIRED),
                        "message": f"The lease passed its ttl of {spec.ttl_seconds}s; "
                        f"agent {checkout.agent} went back to the pool",
                    }
                )
                kopf.event(
                    body,
                    type="Normal",
                    reason=str(EventReason.LEASE_EXPIRED),
                    message=f"Returned agent {checkout.agent} to pool {pool}",
                )
        finally:
            # Whatever ends the lease (expiry, deletion, even cancellation by kopf), the agent
            # goes back, unless the lease lives on past this daemon.
            if keep:
                runtime.restored_leases[(namespace, name)] = checkout
            else:
                handle = runtime.pools.get((namespace, pool))
                if handle is not None:
                    await asyncio.shield(return_agent(runtime, handle, checkout, Outcome.SUCCESS))


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
    timeout = float(
        spec.checkout_timeout_seconds
        or (pool_spec or {}).get("checkoutTimeoutSeconds")
        or DEFAULT_CHECKOUT_TIMEOUT
    )
    handle = await runtime.wait_pool((namespace, pool), timeout)
    if handle is None:
        message = f'AgentPool "{pool}" is not served by the operator after {timeout:g}s'
        await report(_failed(str(Reason.POOL_NOT_FOUND), message))
        return None
    restored = runtime.restored_leases.pop((namespace, name), None)
    if restored is not None:
        return restored
    if status.get("agent"):
        # The lease was bound before a restart and its agent did not come back with the pool.
        message = f"agent {status['agent']} of this lease is gone; create a new lease"
        await report(_failed(AGENT_LOST, message))
        return None
    if status.get("phase") != "Pending":
        await report(
            {"phase": "Pending", "reason": "Waiting", "message": f"Waiting for pool {pool}"}
        )
    holder = f"lease:{namespace}/{name}"
    try:
        return await handle.broker.checkout(
            timeout=timeout if spec.wait else 0.0, priority=spec.priority, holder=holder
        )
    except PoolExhausted as error:
        reason = CHECKOUT_TIMEOUT if spec.wait else str(Reason.POOL_FULL)
        await report(_failed(reason, str(error)))
    except PoolClosed as error:
        await report(_failed(str(Reason.POOL_NOT_FOUND), str(error)))
    return None
