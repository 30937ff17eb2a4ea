"""The AgentLease controller: one warm agent held for a client, returned on delete or expiry.

A kopf daemon per lease checks an agent out of the pool's broker (queueing, or failing at once
with PoolFull when ``wait`` is false), writes where to reach it and which Secret holds its token,
and holds it until the lease is deleted or its ttl passes. A restarted operator takes the same
agent back from the lease's status, so a bound lease survives a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime
from typing import Any

import kopf

from agentpool import GROUP, VERSION
from agentpool.api import AgentLeaseSpec
from agentpool.api.reasons import EventReason, Reason
from agentpool.broker import Checkout, Outcome, PoolClosed, PoolExhausted
from agentpool.handlers.runtime import Runtime
from agentpool.io.kube import NotFound
from agentpool.pool.manifests import TOKEN_KEY, token_secret_name
from agentpool.pool.pods import epoch

TERMINAL = frozenset({"Released", "Expired", "Failed"})
DEFAULT_CHECKOUT_TIMEOUT = 30.0


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
        lease = dict(body)
        spec = AgentLeaseSpec.model_validate(body.get("spec") or {})
        pool = spec.pool_ref.name

        async def report(patch: dict[str, Any]) -> None:
            with contextlib.suppress(NotFound):
                await runtime.kube.patch_status("agentleases", namespace, name, patch)

        checkout = await bind(runtime, lease, spec, status, report)
        if checkout is None:
            return
        expires = epoch(status.get("expireTime")) if status.get("phase") == "Bound" else None
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
        handle = runtime.pools.get((namespace, pool))
        lost = asyncio.ensure_future(checkout.wait_lost())
        try:
            remaining = max(0.0, expires - time.time())
            stop = asyncio.ensure_future(stopped.wait(remaining))
            await asyncio.wait({lost, stop}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
        finally:
            lost.cancel()
        if checkout.is_lost:
            await report(
                {
                    "phase": "Failed",
                    "reason": "AgentLost",
                    "message": checkout.lost_reason or "the agent was lost",
                }
            )
            return
        if stopped and not (
            stopped.reason and stopped.reason & kopf.DaemonStoppingReason.RESOURCE_DELETED
        ):
            # The operator is stopping: the lease stays Bound and is taken up again on restart.
            return
        if handle is not None:
            handle.broker.checkin(checkout, Outcome.SUCCESS)
        if not stopped:
            await report(
                {
                    "phase": "Expired",
                    "reason": "Expired",
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


async def bind(
    runtime: Runtime,
    lease: dict[str, Any],
    spec: AgentLeaseSpec,
    status: dict[str, Any],
    report: Any,
) -> Checkout | None:
    """The agent for the lease: the one it already holds after a restart, else a new checkout.

    Reports Failed (PoolNotFound, PoolFull, CheckoutTimeout) and returns None when none can be had.
    """
    namespace, name = lease["metadata"]["namespace"], lease["metadata"]["name"]
    pool = spec.pool_ref.name
    try:
        await runtime.kube.get_custom("agentpools", namespace, pool)
    except NotFound:
        await report(
            {
                "phase": "Failed",
                "reason": str(Reason.POOL_NOT_FOUND),
                "message": f'AgentPool "{pool}" not found in namespace "{namespace}"',
            }
        )
        return None
    handle = await runtime.wait_pool((namespace, pool), DEFAULT_CHECKOUT_TIMEOUT)
    if handle is None:
        await report(
            {
                "phase": "Failed",
                "reason": str(Reason.POOL_NOT_FOUND),
                "message": f'AgentPool "{pool}" is not served by the operator',
            }
        )
        return None
    holder = f"lease:{namespace}/{name}"
    if status.get("phase") == "Bound" and status.get("agent"):
        restored = handle.broker.restore_busy(str(status["agent"]), None)
        if restored is not None:
            return restored
    if status.get("phase") != "Pending":
        await report(
            {
                "phase": "Pending",
                "reason": "Waiting",
                "message": f"Waiting for an agent of pool {pool}",
            }
        )
    pool_spec = (await runtime.kube.get_custom("agentpools", namespace, pool)).get("spec") or {}
    timeout = float(
        spec.checkout_timeout_seconds
        or pool_spec.get("checkoutTimeoutSeconds")
        or DEFAULT_CHECKOUT_TIMEOUT
    )
    try:
        return await handle.broker.checkout(
            timeout=timeout if spec.wait else 0.0, priority=spec.priority, holder=holder
        )
    except PoolExhausted as error:
        reason = "CheckoutTimeout" if spec.wait else str(Reason.POOL_FULL)
        await report({"phase": "Failed", "reason": reason, "message": str(error)})
    except PoolClosed as error:
        await report(
            {"phase": "Failed", "reason": str(Reason.POOL_NOT_FOUND), "message": str(error)}
        )
    return None
