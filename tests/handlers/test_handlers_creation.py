"""A pod the pool creates is known from the create's answer, but the pod watch may tell of it first:
a pod that fails at once (no command, a missing image) can be Failed, or deleted, before the
answer reaches the pool's loop. The answer must not take the pool back to an older pod, or the
pool waits on a pod that has long failed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import kopf
from poolfakes import event, pool_handle, runtime_of

from agentpool.api.resources import AgentPoolSpec
from agentpool.handlers import pools
from agentpool.handlers.poolstatus import current_status
from agentpool.handlers.runtime import PoolHandle, Runtime
from agentpool.pool import PoolPolicy
from agentpool.pool.manifests import POOL_LABEL, agent_pod

POOL: dict[str, Any] = {
    "apiVersion": "agentpool.dev/v1alpha1",
    "kind": "AgentPool",
    "metadata": {"name": "p", "namespace": "ns", "uid": "pool-uid"},
    "spec": {"image": "agent:1", "minSize": 1},
}


def created(body: dict[str, Any], *, rv: str, phase: str) -> dict[str, Any]:
    """The pod the API server made of ``body``, at ``rv`` and in ``phase``."""
    metadata = {**body["metadata"], "name": "p-x1", "uid": "uid-x1", "resourceVersion": rv}
    return {**body, "metadata": metadata, "status": {"phase": phase}}


class Kube:
    """Creates pods; ``before_answer`` runs after the pod exists and before the answer returns,
    as watch events can."""

    def __init__(self, before_answer: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        self.before_answer = before_answer

    async def create_pod(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        await self.before_answer(body)
        return created(body, rv="10", phase="Pending")


def served(runtime: Runtime) -> PoolHandle:
    handle = pool_handle(1)
    runtime.pools.serve(handle)
    return handle


async def create_one(runtime: Runtime, handle: PoolHandle) -> int:
    return await pools.create_agents(
        runtime,
        handle,
        body=kopf.Body(POOL),
        pool=POOL,
        spec=AgentPoolSpec.model_validate(POOL["spec"]),
        wanted=1,
        now=1000.0,
    )


async def test_a_pod_that_failed_before_the_create_answered_stays_failed() -> None:
    runtime: Runtime

    async def fails_at_once(body: dict[str, Any]) -> None:
        await event(runtime, "ADDED", created(body, rv="10", phase="Pending"))
        await event(runtime, "MODIFIED", created(body, rv="12", phase="Failed"))

    runtime = runtime_of(Kube(fails_at_once))
    handle = served(runtime)
    assert await create_one(runtime, handle) == 1
    assert handle.pods["p-x1"]["status"]["phase"] == "Failed"
    (agent,) = handle.broker.agents()
    assert agent.failed


async def test_a_pod_deleted_before_the_create_answered_is_not_brought_back() -> None:
    runtime: Runtime

    async def deleted_at_once(body: dict[str, Any]) -> None:
        await event(runtime, "DELETED", created(body, rv="11", phase="Pending"))

    runtime = runtime_of(Kube(deleted_at_once))
    handle = served(runtime)
    await create_one(runtime, handle)
    assert handle.pods == {}
    assert handle.broker.agents() == ()


async def test_a_pod_created_without_events_yet_is_counted_at_once() -> None:
    async def quiet(body: dict[str, Any]) -> None:
        assert body["metadata"]["labels"][POOL_LABEL] == "p"

    runtime = runtime_of(Kube(quiet))
    handle = served(runtime)
    assert await create_one(runtime, handle) == 1
    assert set(handle.pods) == {"p-x1"}
    assert [agent.name for agent in handle.broker.agents()] == ["p-x1"]


def test_a_pod_failed_since_the_pass_planned_is_reported_with_its_own_reason() -> None:
    """The pass wrote its status after the pod failed but before the next pass retired it: the
    Degraded condition already counts it, with the pod's reason, not a bare PodFailed."""
    runtime = runtime_of(Kube(lambda body: asyncio.sleep(0)))
    handle = served(runtime)
    pod = created(
        agent_pod(POOL, spec=AgentPoolSpec.model_validate(POOL["spec"])), rv="12", phase="Failed"
    )
    pod["status"].update(reason="NoLocalCommand", message="give the container a command")
    handle.pods["p-x1"] = pod
    pools.sync_broker(handle)
    status = current_status(handle, POOL, PoolPolicy(min_size=1, max_size=1), time.time())
    (degraded,) = (c for c in status["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "True"
    assert degraded["reason"] == "NoLocalCommand"
    assert (
        "give the container a command (1 agent failed before turning Ready: p-x1)"
        in (degraded["message"])
    )
