"""Starting pools share their LISTs: after a restart, a thousand pools make a few LISTs of pods
and of leases, not two thousand, and no pool is answered by a LIST older than its request."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentpool.handlers.listings import BATCH, Gathered, Listings
from agentpool.pool.manifests import POOL_LABEL


def pod(name: str, pool: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {POOL_LABEL: pool}}}


def selected(selector: str) -> set[str]:
    """The pools a selector of ``pool_selector`` names."""
    if " in (" in selector:
        return set(selector.split(" in (", 1)[1].rstrip(")").split(","))
    return {selector.split("=", 1)[1]}


class Kube:
    """Holds pods; each LIST waits for the test to let it through, and is recorded; the next
    one fails with ``failing``, if set."""

    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []
        self.selectors: list[str] = []
        self.asked = asyncio.Event()
        self.gate = asyncio.Event()
        self.failing: Exception | None = None

    async def list_pods(self, namespace: str, labels: str) -> list[dict[str, Any]]:
        self.selectors.append(labels)
        self.asked.set()
        listed = [p for p in self.pods if p["metadata"]["labels"][POOL_LABEL] in selected(labels)]
        await self.gate.wait()
        failing, self.failing = self.failing, None
        if failing is not None:
            raise failing
        return listed

    async def list_custom(self, plural: str, namespace: str) -> list[dict[str, Any]]:
        self.selectors.append(plural)
        await self.gate.wait()
        return [{"metadata": {"name": "lease-1"}}]


async def until_listed(kube: Kube) -> None:
    async with asyncio.timeout(5):
        await kube.asked.wait()


async def test_pools_asking_while_a_list_is_out_share_the_next_one() -> None:
    """One pool's LIST is out; five more ask meanwhile: one more LIST answers all five, each
    with its own pods only."""
    kube = Kube()
    kube.pods = [pod(f"p{n}-a", f"p{n}") for n in range(6)] + [pod("other-a", "other")]
    listings = Listings(kube)  # type: ignore[arg-type]
    first = asyncio.ensure_future(listings.pods.get("ns", "p0"))
    await until_listed(kube)
    rest = [asyncio.ensure_future(listings.pods.get("ns", f"p{n}")) for n in range(1, 6)]
    await asyncio.sleep(0)
    kube.gate.set()
    answers = [await first] + [await each for each in rest]
    assert [[p["metadata"]["name"] for p in pods] for pods in answers] == [
        [f"p{n}-a"] for n in range(6)
    ]
    assert kube.selectors == [
        f"{POOL_LABEL}=p0",
        f"{POOL_LABEL} in (p1,p2,p3,p4,p5)",
    ]


async def test_no_pool_is_answered_by_a_list_that_began_before_it_asked() -> None:
    """A pod created after the first LIST began, then asked for: the pool that asked after it
    sees it, as a LIST of its own would have."""
    kube = Kube()
    listings = Listings(kube)  # type: ignore[arg-type]
    first = asyncio.ensure_future(listings.pods.get("ns", "p"))
    await until_listed(kube)
    kube.pods.append(pod("p-new", "p"))
    second = asyncio.ensure_future(listings.pods.get("ns", "p"))
    kube.gate.set()
    assert await first == []
    assert [p["metadata"]["name"] for p in await second] == ["p-new"]


async def test_a_failed_list_fails_its_askers_only() -> None:
    """The LIST fails: every pool that waited for it gets the error, as from its own call; a
    pool that asked while it was out is answered by the next LIST, which succeeds."""
    kube = Kube()
    kube.failing = ConnectionError("the API server went away")
    kube.pods.append(pod("q-a", "q"))
    listings = Listings(kube)  # type: ignore[arg-type]
    first = asyncio.ensure_future(listings.pods.get("ns", "p"))
    await until_listed(kube)
    later = asyncio.ensure_future(listings.pods.get("ns", "q"))
    await asyncio.sleep(0)
    kube.gate.set()
    with pytest.raises(ConnectionError):
        await first
    assert [p["metadata"]["name"] for p in await later] == ["q-a"]
    kube.pods.append(pod("p-a", "p"))
    assert [p["metadata"]["name"] for p in await listings.pods.get("ns", "p")] == ["p-a"]


async def test_stopped_listings_leave_nobody_waiting_and_list_again_later() -> None:
    """The operator stops while a LIST is out and another pool waits for the next: both
    askers are cancelled, none waits for ever, and a later request lists anew."""
    kube = Kube()
    listings = Listings(kube)  # type: ignore[arg-type]
    first = asyncio.ensure_future(listings.pods.get("ns", "p"))
    await until_listed(kube)
    later = asyncio.ensure_future(listings.pods.get("ns", "q"))
    await asyncio.sleep(0)
    for task in asyncio.all_tasks():
        if "_drain" in repr(task.get_coro()):
            task.cancel()
    for asker in (first, later):
        with pytest.raises(asyncio.CancelledError):
            await asker
    kube.gate.set()
    kube.pods.append(pod("p-a", "p"))
    assert [p["metadata"]["name"] for p in await listings.pods.get("ns", "p")] == ["p-a"]


async def test_a_thousand_pools_make_a_list_per_hundred() -> None:
    """After a restart every pool asks at once: ten LISTs of pods and one of leases answer a
    thousand pools."""
    kube = Kube()
    kube.gate.set()
    listings = Listings(kube)  # type: ignore[arg-type]
    names = [f"p{n:04d}" for n in range(1000)]
    await asyncio.gather(*(listings.pods.get("ns", name) for name in names))
    assert len(kube.selectors) == 1000 // BATCH
    leases = await asyncio.gather(*(listings.leases.get("ns", name) for name in names))
    assert kube.selectors[-1] == "agentleases"
    assert kube.selectors.count("agentleases") == 1
    assert all(found == [{"metadata": {"name": "lease-1"}}] for found in leases)


async def test_namespaces_are_listed_apart() -> None:
    """Pools of two namespaces never share a LIST: each namespace's is its own call."""
    calls: list[tuple[str, list[str]]] = []

    async def fetch(namespace: str, keys: list[str]) -> dict[str, str]:
        calls.append((namespace, keys))
        return {key: namespace for key in keys}

    gathered: Gathered[str] = Gathered(fetch)
    found = await asyncio.gather(gathered.get("a", "p"), gathered.get("b", "p"))
    assert found == ["a", "b"]
    assert sorted(calls) == [("a", ["p"]), ("b", ["p"])]
