"""What the pool handler tests share: a runtime around a fake API client, a pool's handle, and
pod watch events delivered as kopf delivers them."""

from __future__ import annotations

import asyncio
from typing import Any, Literal, cast

import kopf

from agentpool.broker import Broker
from agentpool.handlers import pods
from agentpool.handlers.runtime import PoolHandle, Runtime
from agentpool.io.agents import AgentClient
from agentpool.io.kube import Kube
from agentpool.pool import PoolPolicy


def runtime_of(kube: object) -> Runtime:
    """The operator's runtime, its API client ``kube``: a fake of the few calls the test's
    handler makes (it is no Kube, hence the cast). The pool handlers make no agent calls."""
    return Runtime(kube=cast(Kube, kube), agents=cast(AgentClient, None))


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


async def event(
    runtime: Runtime, kind: Literal["ADDED", "MODIFIED", "DELETED"], body: dict[str, Any]
) -> None:
    """The pod watch delivers ``kind`` of ``body``."""
    raw: kopf.RawEvent = {"type": kind, "object": cast(kopf.RawBody, body)}
    await pods.pod_event(runtime, event=raw, namespace="ns", labels=body["metadata"]["labels"])


class PodsKube:
    """Creates pods as asked (a dry run is answered, not kept), deletes none, and keeps the
    status written, merged."""

    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.status: dict[str, Any] = {}
        self.grew = asyncio.Event()

    async def create_pod(
        self, namespace: str, body: dict[str, Any], dry_run: bool = False
    ) -> dict[str, Any]:
        name = f"p-{len(self.created)}"
        stamped = {"name": name, "uid": name, "creationTimestamp": "2026-12-07T09:00:00Z"}
        pod = {**body, "metadata": {**body["metadata"], **stamped}}
        if not dry_run:
            self.created.append(pod)
            self.grew.set()
        return pod

    async def delete_pod(self, namespace: str, name: str) -> None:
        return None

    async def patch_status(
        self, plural: str, namespace: str, name: str, status: dict[str, Any]
    ) -> None:
        self.status = {**self.status, **status}
