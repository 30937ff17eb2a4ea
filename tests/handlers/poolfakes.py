"""What the pool handler tests share: a runtime of a fake API client and the pools' registry, a
pool's handle, and pod watch events delivered as kopf delivers them."""

from __future__ import annotations

import asyncio
from typing import Any

from agentpool.broker import Broker
from agentpool.handlers import pods
from agentpool.handlers.runtime import PoolHandle, Pools
from agentpool.pool import PoolPolicy


class Runtime:
    def __init__(self, kube: Any) -> None:
        self.kube, self.pools = kube, Pools()


def pool_handle(size: int) -> PoolHandle:
    """The handle of pool ns/p (uid ``pool-uid``) of ``size`` agents, registered nowhere yet."""
    return PoolHandle(
        namespace="ns",
        name="p",
        broker=Broker("p", PoolPolicy(min_size=size, max_size=size)),
        port=8080,
        wake=asyncio.Event(),
        uid="pool-uid",
    )


async def event(runtime: Runtime, kind: str, body: dict[str, Any]) -> None:
    """The pod watch delivers ``kind`` (ADDED, MODIFIED, DELETED) of ``body``."""
    raw: Any = {"type": kind, "object": body}
    await pods.pod_event(runtime, event=raw, namespace="ns", labels=body["metadata"]["labels"])  # type: ignore[arg-type]
