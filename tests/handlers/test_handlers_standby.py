"""A replica acts (and its gateway says it is ready) only while no live peer outranks it, as kopf
decides from the same peering object."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest

from agentpool.handlers.runtime import Runtime
from agentpool.handlers.standby import acts, follow_peers, peering_paths

NOW = datetime.datetime(2026, 12, 3, 12, 0, 0, tzinfo=datetime.UTC)


def peer(priority: int, *, seen_seconds_ago: float = 1, lifetime: int = 60) -> dict[str, Any]:
    seen = NOW - datetime.timedelta(seconds=seen_seconds_ago)
    return {"priority": priority, "lifetime": lifetime, "lastseen": seen.isoformat()}


@pytest.mark.parametrize(
    ("peers", "expected"),
    [
        ({}, True),
        ({"me": peer(5)}, True),
        ({"me": peer(5), "other": peer(4)}, True),
        ({"me": peer(5), "other": peer(6)}, False),
        ({"me": peer(5), "other": peer(5)}, False),
        ({"me": peer(5), "other": peer(9, seen_seconds_ago=61)}, True),
        ({"me": peer(5), "other": {"priority": "x"}}, True),
        ({"me": peer(5), "other": "garbled"}, True),
        ({"other": {**peer(9), "lastseen": "2026-12-03T11:59:59"}}, False),
    ],
)
def test_a_replica_acts_unless_a_live_peer_outranks_it(
    peers: dict[str, Any], expected: bool
) -> None:
    """A live peer of higher or equal priority makes this one stand by; a dead one, or a
    garbled entry, does not."""
    assert acts(peers, identity="me", priority=5, now=NOW) is expected


def test_the_peering_objects_read_are_the_ones_kopf_keeps() -> None:
    """Cluster-wide, the ClusterKopfPeering; serving namespaces, each one's KopfPeering, but a
    namespace pattern names none."""
    assert peering_paths("agentpool", []) == ["/apis/kopf.dev/v1/clusterkopfpeerings/agentpool"]
    assert peering_paths("agentpool", ["a", "t-*"]) == [
        "/apis/kopf.dev/v1/namespaces/a/kopfpeerings/agentpool"
    ]


async def test_a_replica_that_acts_again_is_no_longer_paused_for_its_leases() -> None:
    """A paused replica leaves a lease whose pool it does not serve to its peer; once its
    peering object says it acts again (the peer died, say), it reports such a lease itself,
    even before it serves any pool."""
    runtime = Runtime(kube=Peering({"me": alive(5), "other": alive(9)}), agents=None)  # type: ignore[arg-type]
    runtime.leases.pause()
    follower = asyncio.ensure_future(
        follow_peers(runtime, ["/peering"], identity="me", priority=5, every=0.01)
    )
    try:
        await until(lambda: runtime.serving is False and runtime.leases.paused, "standing by")
        runtime.kube.status = {"me": alive(5)}  # type: ignore[attr-defined]
        await until(lambda: runtime.serving and not runtime.leases.paused, "acting again")
    finally:
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)


def alive(priority: int) -> dict[str, Any]:
    """A peer seen just now."""
    seen = datetime.datetime.now(datetime.UTC).isoformat()
    return {"priority": priority, "lifetime": 60, "lastseen": seen}


class Peering:
    """The API server's peering object, as the follower reads it."""

    def __init__(self, status: dict[str, Any]) -> None:
        self.status = status

    async def request(self, method: str, path: str) -> dict[str, Any]:
        return {"status": self.status}


async def until(predicate: Any, message: str, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"waited {timeout:g}s for {message}")
        await asyncio.sleep(0.01)
