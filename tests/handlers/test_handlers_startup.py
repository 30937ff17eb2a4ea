"""A starting pool knows its pods from its own listing and the pod events seen meanwhile, so a
restarted operator need not wait for every pod of every pool to be listed before serving one;
a pod deleted while the pool starts is not brought back by a listing taken before the delete."""

from __future__ import annotations

from typing import Any

from poolfakes import event, pool_handle, runtime_of

from agentpool.handlers import pools
from agentpool.handlers.runtime import PoolHandle, Runtime
from agentpool.pool.manifests import POOL_LABEL


def pod(name: str, rv: str, *, owner: str = "pool-uid") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": rv,
            "labels": {POOL_LABEL: "p"},
            "ownerReferences": [{"controller": True, "uid": owner}],
        },
        "status": {"phase": "Running"},
    }


class Kube:
    """Lists the pods it holds; ``during`` runs while the listing is on its way."""

    def __init__(self, listed: list[dict[str, Any]], during: Any = None) -> None:
        self.listed, self.during, self.selectors = listed, during, []

    async def list_pods(self, namespace: str, labels: str) -> list[dict[str, Any]]:
        self.selectors.append((namespace, labels))
        if self.during is not None:
            await self.during()
        return self.listed


def starting(runtime: Runtime) -> PoolHandle:
    handle = pool_handle(2)
    runtime.pools.starting[("ns", "p")] = handle
    return handle


async def test_a_starting_pool_adopts_its_listed_pods_and_only_its_own() -> None:
    kube = Kube([pod("a", "5"), pod("b", "6"), pod("old", "2", owner="earlier-pool")])
    runtime = runtime_of(kube)
    handle = starting(runtime)
    await pools.adopt_pods(runtime, handle)
    assert set(handle.pods) == {"a", "b"}
    assert kube.selectors == [("ns", f"{POOL_LABEL}=p")]


async def test_a_pod_deleted_while_the_pool_lists_is_not_brought_back() -> None:
    runtime: Runtime

    async def deleted_meanwhile() -> None:
        await event(runtime, "DELETED", pod("a", "7"))

    runtime = runtime_of(Kube([pod("a", "5"), pod("b", "6")], during=deleted_meanwhile))
    handle = starting(runtime)
    await pools.adopt_pods(runtime, handle)
    assert set(handle.pods) == {"b"}


async def test_events_before_the_loop_started_join_the_listing_newest_first() -> None:
    runtime = runtime_of(Kube([pod("a", "5"), pod("b", "9")]))
    # Seen before the pool's loop existed: a newer "a", an older "b", and "c" not listed yet.
    for body in (pod("a", "8"), pod("b", "4"), pod("c", "10")):
        await event(runtime, "ADDED", body)
    handle = starting(runtime)
    await pools.adopt_pods(runtime, handle)
    versions = {name: p["metadata"]["resourceVersion"] for name, p in handle.pods.items()}
    assert versions == {"a": "8", "b": "9", "c": "10"}
