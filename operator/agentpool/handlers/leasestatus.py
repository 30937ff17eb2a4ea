"""Writing an AgentLease's status: each phase's patch with its conditions.

The lease handlers (:mod:`agentpool.handlers.leases`, :mod:`agentpool.handlers.releases`) write
every status through a :class:`StatusWriter`, with the patches :mod:`agentpool.pool.leases`
gives; :func:`bound_status` is the Bound one of a lease's binding, naming the lease's own token
Secret (never the pool's).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from agentpool import GROUP, VERSION
from agentpool.api.base import KeyRef
from agentpool.api.conditions import format_time
from agentpool.api.leases import AgentLeaseStatus
from agentpool.api.raw import RawCondition
from agentpool.broker.registry import PoolKey
from agentpool.handlers.binds import LeaseBinding
from agentpool.handlers.runtime import Runtime
from agentpool.io.kube import ObjectNotFound
from agentpool.pool import leases
from agentpool.pool.manifests import TOKEN_KEY, lease_token_secret_name

Report = Callable[[AgentLeaseStatus], Awaitable[None]]


def post_event(runtime: Runtime, pool: PoolKey, reason: str, message: str) -> None:
    """An Event about a lease's pool, counted with its window's others of the same reason
    (:class:`~agentpool.io.events.EventSeries`), unless lease Events are turned off."""
    if not runtime.settings.leases.events:
        return
    handle = runtime.pools.get(pool)
    regarding = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "AgentPool",
        "namespace": pool[0],
        "name": pool[1],
        "uid": handle.uid if handle is not None else "",
    }
    runtime.lease_events.post(regarding, type="Normal", reason=reason, message=message)


def failed_status(reason: str, message: str) -> AgentLeaseStatus:
    return leases.ended_status("Failed", reason, message)


def bound_status(held: LeaseBinding, bound_time: str) -> AgentLeaseStatus:
    """The lease holds its agent until the expiry the agent was last given."""
    return leases.bound_status(
        pool=held.pool,
        agent=held.checkout.agent,
        endpoint=held.checkout.endpoint,
        token_secret_ref=KeyRef(name=lease_token_secret_name(held.key[1]), key=TOKEN_KEY),
        bound_time=bound_time,
        expire_time=held.expire_time,
    )


class StatusWriter:
    """Writes one lease's status, each patch with the conditions its phase gives, stamped with a
    transition time that moves only when a condition's status changes, and the generation the
    lease has then (a renewal is a spec change)."""

    def __init__(self, runtime: Runtime, body: Mapping[str, Any]) -> None:
        self.runtime = runtime
        self.body = body
        self.namespace = str(body["metadata"].get("namespace") or "")
        self.name = str(body["metadata"]["name"])
        self.conditions: list[RawCondition] = list(
            (body.get("status") or {}).get("conditions") or []
        )

    async def __call__(self, status: AgentLeaseStatus) -> None:
        patch, conditions = leases.status_patch(
            status,
            self.conditions,
            generation=self.body["metadata"].get("generation"),
            now=format_time(self.runtime.clock.now()),
        )
        with contextlib.suppress(ObjectNotFound):
            await self.runtime.kube.patch_status("agentleases", self.namespace, self.name, patch)
        self.conditions = conditions
