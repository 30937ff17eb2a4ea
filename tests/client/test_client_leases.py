"""``client.lease``, ``client.call`` and ``client.pool_status`` against a cluster and its operator.

Each test proves a promise a program relies on: a lease's agent serves several calls and goes
back when the block ends, however it ends; a pool with no agent to give says so with a typed
error carrying the operator's reason; the pool's status reads as poolboy's ``status/1``.
"""

from __future__ import annotations

import asyncio

import pytest
from client_support import FAST, Outside

from agentpool.api import AgentPoolStatus
from agentpool.client import CallFailed, Client, LeaseFailed, NotFound, PoolExhausted
from cluster import wait_for, wait_for_async

pytestmark = pytest.mark.cluster


class Boom(Exception):
    """What the holder's block raises."""


async def test_a_lease_serves_several_calls_on_one_agent_and_gives_it_back(
    client: Client, outside: Outside
) -> None:
    """Every call in the block reaches the same agent (the pool's only one), and once the block
    ends the lease is gone and the agent idle again."""
    pool = outside.pool("p", agents=1)
    async with client.lease(pool, ttl=60) as agent:
        outputs = [await agent.invoke({"n": n}) for n in range(3)]
        held = outside.leases()
        assert [lease["status"]["agent"] for lease in held] == [agent.name]
        await asyncio.to_thread(
            wait_for, lambda: outside.available(pool) == 0, 10, message="the agent busy"
        )
    assert outputs == [{"n": 0}, {"n": 1}, {"n": 2}]
    await asyncio.to_thread(outside.returned, pool, 1)


async def test_a_block_that_raises_still_gives_its_agent_back_at_once(
    client: Client, outside: Outside
) -> None:
    """The block's own exception comes out unchanged, and the agent is back in the pool within
    a deadline far shorter than the lease's ttl: the client released it, not the expiry."""
    pool = outside.pool("p", agents=1)

    async def holder() -> None:
        async with client.lease(pool, ttl=300) as agent:
            await agent.invoke("hello")
            raise Boom

    with pytest.raises(Boom):
        await holder()
    await asyncio.to_thread(outside.returned, pool, 1, 10)


async def test_a_cancelled_holder_gives_its_agent_back(client: Client, outside: Outside) -> None:
    """A task cancelled inside the block (a request handler timing out) still releases."""
    pool = outside.pool("p", agents=1)
    bound = asyncio.Event()

    async def holder() -> None:
        async with client.lease(pool, ttl=300):
            bound.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(holder())
    await asyncio.wait_for(bound.wait(), 60)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.to_thread(outside.returned, pool, 1, 10)


async def test_call_returns_the_output_and_an_item_failure_is_a_CallFailed(
    client: Client, outside: Outside
) -> None:
    """``call`` is one item on one agent; the agent's failure comes back with its reason and
    message, and the agent goes back either way."""
    pool = outside.pool("p", agents=1, agent="slow_start", env=FAST)
    output = await client.call(pool, {"text": "hi"}, input={"workSeconds": 0})
    assert output["length"] == len('{"text":"hi"}')
    with pytest.raises(CallFailed) as failed:
        await client.call(pool, {"fail": True, "message": "no such document"})
    assert failed.value.reason == "HandlerError"
    assert "no such document" in failed.value.message
    await asyncio.to_thread(outside.returned, pool, 1)


async def test_a_pool_with_no_agent_to_give_raises_PoolExhausted(
    client: Client, outside: Outside
) -> None:
    """With the only agent held, a lease that will not wait fails at once with PoolFull, and one
    that waits fails with CheckoutTimeout once its checkout timeout passes."""
    pool = outside.pool("p", agents=1)
    async with client.lease(pool):
        with pytest.raises(PoolExhausted) as full:
            async with client.lease(pool, wait=False):
                pass
        assert full.value.reason == "PoolFull"
        with pytest.raises(PoolExhausted) as timed_out:
            async with client.lease(pool, checkout_timeout=1):
                pass
        assert timed_out.value.reason == "CheckoutTimeout"
    await asyncio.to_thread(outside.returned, pool, 1)


async def test_a_missing_pool_is_a_typed_error_with_the_operators_reason(
    client: Client, outside: Outside
) -> None:
    """A lease of a pool that does not exist fails with the operator's reason PoolNotFound, as
    does the pool's status, and no lease is left behind."""
    with pytest.raises(LeaseFailed) as failed:
        async with client.lease("absent", checkout_timeout=2):
            pass
    assert failed.value.reason == "PoolNotFound"
    assert '"absent"' in failed.value.message
    with pytest.raises(NotFound) as missing:
        await client.pool_status("absent")
    assert missing.value.reason == "PoolNotFound"
    wait_for(lambda: not outside.leases(), 10, message="the failed lease deleted")


async def test_pool_status_reads_as_poolboys_status(client: Client, outside: Outside) -> None:
    """``pool_status`` gives state, available, overflow and busy: Ready with idle agents, Full
    once every agent up to maxSize is held (one of them overflow)."""
    pool = outside.pool("p", agents=1, maxSize=2)
    idle = await client.pool_status(pool)
    assert (idle.state, idle.available, idle.busy, idle.overflow) == ("Ready", 1, 0, 0)
    async with client.lease(pool), client.lease(pool):
        full = await wait_for_async(
            lambda: _status_when(client, pool, busy=2), 30, message="two agents busy"
        )
        assert (full.state, full.available, full.overflow) == ("Full", 0, 1)


async def _status_when(client: Client, pool: str, *, busy: int) -> AgentPoolStatus | None:
    status = await client.pool_status(pool)
    return status if status.busy == busy else None
