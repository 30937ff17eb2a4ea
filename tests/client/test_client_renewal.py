"""A held lease lives as long as its holder renews it, and not longer.

The client renews ``spec.renewTime`` every ttl/3 while a block holds the lease; the operator
moves the expiry with each renewal. A holder that renews keeps its agent past the first ttl; one
that stops loses it at expiry, and its next call says so with the operator's reason. Each call
goes with the lease's own token, which is the lease's Secret, never the pool's.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime

import pytest
from client_support import ClientCluster, Outside

from agentpool.client import Client, ClientSettings, LeaseFailed
from cluster import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

TTL = 6


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


async def test_a_holder_that_renews_keeps_its_agent_past_the_first_ttl(
    client: Client, outside: Outside
) -> None:
    """Held for twice its ttl, the lease is still Bound to the same agent, its expiry moved on
    by the renewals, and the agent still answers the lease's token."""
    pool = outside.pool("p", agents=1)
    async with client.lease(pool, ttl=TTL) as agent:
        first = outside.status("agentleases", agent.lease)
        first_expiry = _epoch(first["expireTime"])
        assert first["tokenSecretRef"]["name"] == f"{agent.lease}-lease-token"

        def renewed_past_the_first_ttl() -> bool:
            status = outside.status("agentleases", agent.lease)
            moved = _epoch(status["expireTime"]) >= first_expiry + TTL
            return moved and time.time() > first_expiry + 1

        await asyncio.to_thread(
            wait_for, renewed_past_the_first_ttl, 4 * TTL, message="renewed past the first ttl"
        )
        assert await agent.invoke("still mine") == "still mine"
        held = outside.status("agentleases", agent.lease)
        assert (held["phase"], held["agent"]) == ("Bound", agent.name)
        assert agent.ended is None
    await asyncio.to_thread(outside.returned, pool, 1)


async def test_a_holder_that_stops_renewing_loses_its_agent_at_expiry(
    client_cluster: ClientCluster, outside: Outside
) -> None:
    """With renewals further apart than the ttl, the lease expires under its holder: the agent
    goes back to the pool and the holder's next call raises LeaseFailed with reason Expired."""
    pool = outside.pool("p", agents=1)
    handle = client_cluster.handle
    lazy = ClientSettings(renew_fraction=100.0)
    async with (
        Client.from_kubeconfig(
            handle.kubeconfig, handle.context, namespace=outside.namespace, settings=lazy
        ) as client,
        client.lease(pool, ttl=2) as agent,
    ):
        assert await agent.invoke("mine for now") == "mine for now"
        await asyncio.to_thread(
            wait_for,
            lambda: outside.status("agentleases", agent.lease).get("phase") == "Expired",
            30,
            message="the lease expired",
        )
        await asyncio.to_thread(
            wait_for, lambda: outside.available(pool) == 1, 30, message="agent back"
        )
        with pytest.raises(LeaseFailed) as lost:
            await agent.invoke("too late")
        assert lost.value.reason == "Expired"
        assert agent.ended is lost.value
    await asyncio.to_thread(outside.returned, pool, 1)


async def test_a_call_after_the_block_raises_at_once(client: Client, outside: Outside) -> None:
    """An agent kept past its block is released: calling it raises LeaseFailed (Released)."""
    pool = outside.pool("p", agents=1)
    async with client.lease(pool) as agent:
        pass
    with pytest.raises(LeaseFailed) as released:
        await agent.invoke("after")
    assert released.value.reason == "Released"
