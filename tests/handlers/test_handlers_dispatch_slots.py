"""A cast item on an agent with several slots holds only its own slot, and only until the agent
reports that item done: the agent's other items do not keep it, so a steady stream of casts
never holds a slot until its call timeout retires the agent."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest

from agentpool.agent import Agent, Context
from agentpool.agent.server import AgentServer
from agentpool.agent.settings import Settings
from agentpool.broker import Broker
from agentpool.handlers.dispatch import BrokerDispatcher
from agentpool.handlers.runtime import PoolHandle, Runtime
from agentpool.io.agents import AgentClient
from agentpool.io.kube import Kube
from agentpool.pool import ObservedAgent, PoolPolicy
from agentpool.pool.checkin import CheckinOutcome
from agentpool.runs.contracts import CheckoutTerms
from brokerwait import queued, wait_until

TOKEN = "pool-token-cast"


def envelope(key: str) -> dict[str, Any]:
    return {"id": key, "item": key, "input": None, "attempt": 1, "run": "r"}


@pytest.fixture
async def gates() -> dict[str, asyncio.Event]:
    return {"a": asyncio.Event(), "b": asyncio.Event()}


@pytest.fixture
async def served(gates: dict[str, asyncio.Event]) -> AsyncIterator[tuple[BrokerDispatcher, Broker]]:
    async def handler(item: Any, input: Any, context: Context) -> Any:
        await gates[item].wait()
        return item

    started = asyncio.Event()

    async def startup() -> None:
        started.set()

    settings = Settings(host="127.0.0.1", port=0, token=TOKEN, slots=2)
    server = AgentServer(Agent(handler, startup=startup, name="cast-slots"), settings)
    stop = asyncio.Event()
    serving = asyncio.create_task(server.serve_until(stop))
    async with asyncio.timeout(30):
        await started.wait()
    assert server.port is not None
    broker = Broker("p", PoolPolicy(slots=2, port=server.port), clock=lambda: 100.0)
    broker.update_agents(
        [ObservedAgent(name="a", created_at=0.0, ready=True, ready_at=1.0, ip="127.0.0.1")]
    )
    try:
        async with AgentClient() as agents:
            runtime = Runtime(kube=cast(Kube, None), agents=agents)
            handle = PoolHandle(
                namespace="ns",
                name="p",
                broker=broker,
                port=server.port,
                wake=asyncio.Event(),
                token=TOKEN,
            )
            runtime.pools[("ns", "p")] = handle
            yield BrokerDispatcher(runtime, "ns"), broker
    finally:
        for gate in gates.values():
            gate.set()
        stop.set()
        with contextlib.suppress(Exception):
            await serving


async def test_a_cast_item_frees_its_slot_when_it_is_done_not_when_the_agent_is(
    served: tuple[BrokerDispatcher, Broker], gates: dict[str, asyncio.Event]
) -> None:
    """Two cast items fill an agent's two slots; once the first is done, a waiting checkout
    gets its slot while the second still runs."""
    runs, broker = served
    for key in ("a", "b"):
        checkout = await runs.checkout(CheckoutTerms("p", timeout=1, priority=0, holder="r"))
        result = await runs.invoke(checkout, envelope(key), timeout=60, cast=True)
        assert result.ok
        await runs.checkin(checkout, CheckinOutcome.SUCCESS)
    assert broker.agents()[0].busy_slots == 2
    later = CheckoutTerms("p", timeout=20, priority=0, holder="r")
    waiting = asyncio.create_task(runs.checkout(later))
    await wait_until(broker, queued(broker, 1))
    assert not waiting.done()
    gates["a"].set()
    await waiting
    # The slot of "a" went to the waiting checkout while "b" still runs: both slots busy.
    assert not gates["b"].is_set()
    (agent,) = broker.agents()
    assert (agent.busy_slots, agent.lost) == (2, False)
    assert broker.counts()["busy_slots"] == 2
