"""A run's call to an agent races the broker's word that the agent died: the word ends the call
at once, with the item failed as AgentLost, and a run that stops mid-call still stops."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest

from agentpool.api import AgentPoolSpec
from agentpool.broker import Broker
from agentpool.handlers.dispatch import AgentCheckout, BrokerDispatcher
from agentpool.handlers.pools import MOVED
from agentpool.handlers.runtime import PoolHandle, Runtime
from agentpool.io.agents import AgentClient
from agentpool.io.kube import Kube
from agentpool.pool import ObservedAgent, PoolPolicy
from agentpool.pool.checkin import PoolClosed
from agentpool.runs.contracts import CheckoutTerms, ProtocolMismatch
from brokerwait import queued, wait_until
from loopback import read_request

ENVELOPE = {"id": "a", "item": 1, "input": None, "attempt": 1, "run": "r"}


class HeldAgent:
    """An agent whose answers wait until the test releases them."""

    def __init__(self) -> None:
        self.called = asyncio.Event()
        self.release = asyncio.Event()
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await read_request(reader)
            self.called.set()
            await self.release.wait()
            body = b'{"output": "done"}'
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def agent() -> AsyncIterator[HeldAgent]:
    held = HeldAgent()
    server = await asyncio.start_server(held.handle, "127.0.0.1", 0)
    held.port = server.sockets[0].getsockname()[1]
    async with server:
        yield held
        held.release.set()


@pytest.fixture
async def dispatcher(agent: HeldAgent) -> AsyncIterator[tuple[BrokerDispatcher, Broker]]:
    policy = PoolPolicy(min_size=1, max_size=1, port=agent.port)
    broker = Broker("p", policy, clock=lambda: 100.0)
    broker.update_agents(
        [ObservedAgent(name="a", created_at=0.0, ready=True, ready_at=1.0, ip="127.0.0.1")]
    )
    async with AgentClient() as agents:
        # The API client is only asked about pools the runtime does not serve: none here.
        runtime = Runtime(kube=cast(Kube, None), agents=agents)
        handle = PoolHandle(
            namespace="ns", name="p", broker=broker, port=agent.port, wake=asyncio.Event()
        )
        runtime.pools[("ns", "p")] = handle
        yield BrokerDispatcher(runtime, "ns"), broker


async def test_an_agent_lost_mid_call_fails_its_item_at_once(
    agent: HeldAgent, dispatcher: tuple[BrokerDispatcher, Broker]
) -> None:
    """The pod's failure, seen by the broker while the agent holds the call, ends the call with
    AgentLost long before its timeout, and leaves the calling task free to go on."""
    runs, broker = dispatcher
    checkout = await runs.checkout(CheckoutTerms("p", timeout=1, priority=0, holder="r"))

    async def call() -> Any:
        result = await runs.invoke(checkout, dict(ENVELOPE), timeout=300, cast=False)
        # The task that called is not left cancelled: its next await goes through, and a
        # timeout it sets later still works.
        current = asyncio.current_task()
        assert current is not None
        assert current.cancelling() == 0
        await asyncio.sleep(0)
        return result

    calling = asyncio.create_task(call())
    async with asyncio.timeout(10):
        await agent.called.wait()
    broker.update_agents(
        [ObservedAgent(name="a", created_at=0.0, failed=True, ready=False, ip="127.0.0.1")]
    )
    async with asyncio.timeout(10):
        result = await calling
    assert (result.ok, result.reason, result.lost) == (False, "AgentLost", True)
    assert "a" in result.message
    assert not calling.cancelled()
    assert isinstance(checkout, AgentCheckout)
    assert not checkout.abandoned


@pytest.mark.parametrize("lost_too", [False, True], ids=["alone", "agent-lost-too"])
async def test_a_run_stopping_mid_call_stops(
    agent: HeldAgent, dispatcher: tuple[BrokerDispatcher, Broker], lost_too: bool
) -> None:
    """A run cancelled mid-call (suspend, deletion, the operator exiting) stops, and its agent
    is marked as still working on the item; the broker's word that the agent died, arriving in
    the same moment, does not turn the stop into a lost call."""
    runs, broker = dispatcher
    checkout = await runs.checkout(CheckoutTerms("p", timeout=1, priority=0, holder="r"))
    calling = asyncio.create_task(runs.invoke(checkout, dict(ENVELOPE), timeout=300, cast=False))
    async with asyncio.timeout(10):
        await agent.called.wait()
    calling.cancel()
    if lost_too:
        broker.update_agents(
            [ObservedAgent(name="a", created_at=0.0, failed=True, ready=False, ip="127.0.0.1")]
        )
    with pytest.raises(asyncio.CancelledError):
        await calling
    assert isinstance(checkout, AgentCheckout)
    assert checkout.abandoned


async def test_a_runs_first_checkouts_wait_from_when_the_run_arrived() -> None:
    """A run's first ``cap`` checkouts queue as waiting since the run arrived, so the time it
    took to start (reading its pool, writing its status) does not put it behind runs that came
    after it; its later checkouts wait from when they are made."""
    broker = Broker("p", PoolPolicy(min_size=1, max_size=1), clock=lambda: 100.0)
    broker.update_agents(
        [ObservedAgent(name="a", created_at=0.0, ready=True, ready_at=1.0, ip="127.0.0.1")]
    )
    runtime = Runtime(kube=cast(Kube, None), agents=cast(AgentClient, None))
    runtime.pools[("ns", "p")] = PoolHandle(
        namespace="ns", name="p", broker=broker, port=8080, wake=asyncio.Event()
    )
    held = await broker.checkout(timeout=1, holder="other/x")
    runs = BrokerDispatcher(runtime, "ns", arrived=40.0, backdated=2)
    tasks = [
        asyncio.create_task(
            runs.checkout(CheckoutTerms("p", timeout=5, priority=0, holder=f"r/{key}"))
        )
        for key in "abc"
    ]
    async with asyncio.timeout(5):
        while len(broker.waiters()) < 3:
            broker.changed.clear()
            if len(broker.waiters()) < 3:
                await broker.changed.wait()
    assert {w.holder: w.since for w in broker.waiters()} == {
        "r/a": 40.0,
        "r/b": 40.0,
        "r/c": 100.0,
    }
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    broker.checkin(held)


async def test_a_run_is_handed_no_agent_of_an_http_pool() -> None:
    """An HTTP pool's agents serve no POST /invoke: the checkout of a run without spec.request
    is refused, naming the protocol and the fix, before any agent is taken, so the agent stays
    free for others."""
    broker = Broker("p", PoolPolicy(min_size=1, max_size=1), clock=lambda: 100.0)
    broker.update_agents(
        [ObservedAgent(name="a", created_at=0.0, ready=True, ready_at=1.0, ip="127.0.0.1")]
    )
    # Neither client is asked anything: the pool is served, and no agent is called.
    runtime = Runtime(kube=cast(Kube, None), agents=cast(AgentClient, None))
    runtime.pools[("ns", "p")] = PoolHandle(
        namespace="ns",
        name="p",
        broker=broker,
        port=8080,
        wake=asyncio.Event(),
        spec=AgentPoolSpec(protocol="HTTP"),
    )
    runs = BrokerDispatcher(runtime, "ns")
    with pytest.raises(ProtocolMismatch, match='AgentPool "p" serves plain HTTP') as refused:
        await runs.checkout(CheckoutTerms("p", timeout=1, priority=0, holder="r"))
    assert "set spec.request" in str(refused.value)
    assert (await broker.checkout(timeout=0, holder="other")).agent == "a"


@pytest.mark.parametrize("reason", ["moved", "deleted"])
async def test_a_checkout_waits_through_its_pool_moving_and_fails_if_it_was_deleted(
    agent: HeldAgent, reason: str
) -> None:
    """Replicas sharing the pools: a checkout waiting on a pool whose broker closes because the
    pool went to another replica waits for it to be served again (here, handed back) and gets
    an agent there; one whose pool was deleted fails at once with the deletion."""
    policy = PoolPolicy(min_size=1, max_size=1, port=agent.port)
    ready = ObservedAgent(name="a", created_at=0.0, ready=True, ready_at=1.0, ip="127.0.0.1")
    first = Broker("p", policy, clock=lambda: 100.0)
    first.update_agents([ready])
    async with AgentClient() as agents:
        runtime = Runtime(kube=cast(Kube, None), agents=agents)
        handle = PoolHandle(
            namespace="ns", name="p", broker=first, port=agent.port, wake=asyncio.Event()
        )
        runtime.pools.serve(handle)
        runs = BrokerDispatcher(runtime, "ns")
        terms = CheckoutTerms("p", timeout=30, priority=0, holder="r")
        held = await runs.checkout(terms)
        waiting = asyncio.create_task(runs.checkout(terms))
        await wait_until(first, queued(first, 1))
        if reason == "deleted":
            first.close()
            with pytest.raises(PoolClosed, match="was deleted"):
                await waiting
            return
        first.close(MOVED)
        runtime.pools.forget(handle)
        back = Broker("p", policy, clock=lambda: 100.0)
        back.update_agents([ready])
        runtime.pools.serve(
            PoolHandle(namespace="ns", name="p", broker=back, port=agent.port, wake=asyncio.Event())
        )
        async with asyncio.timeout(10):
            checkout = await waiting
        assert isinstance(checkout, AgentCheckout)
        assert checkout.inner.agent == "a"
        assert checkout.handle.broker is back
        assert isinstance(held, AgentCheckout)
