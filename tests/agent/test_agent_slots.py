"""An agent with several slots serves that many items at once: async handlers side by side on
the loop, sync ones on a thread each. Only when every slot is busy is an invoke refused with 409,
and a reset still waits for an agent with no slot busy. Served in this process, so the handlers
can hold their items until the test lets them go."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from agent_processes import wait_for, wait_until

from agentpool.agent import Agent, Context
from agentpool.agent.server import AgentServer
from agentpool.agent.settings import ConfigError, Settings
from agentpool.io.agents import AgentClient, AgentStatus

TOKEN = "pool-token-slots"


def envelope(item_id: str) -> dict[str, object]:
    return {"id": item_id, "item": item_id, "input": None, "attempt": 1, "run": "r"}


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Agent, int], Any]]:
    stops: list[tuple[asyncio.Event, asyncio.Task[int]]] = []

    async def serve(agent: Agent, slots: int) -> str:
        settings = Settings(host="127.0.0.1", port=0, token=TOKEN, slots=slots)
        server = AgentServer(agent, settings)
        stop = asyncio.Event()
        task = asyncio.create_task(server.serve_until(stop))
        stops.append((stop, task))
        await wait_for(lambda: server.ready or task.done(), what="the agent to serve")
        return f"http://127.0.0.1:{server.port}"

    yield serve
    for stop, _ in stops:
        stop.set()
    for _, task in stops:
        async with asyncio.timeout(30):
            await task


async def busy_slots(client: AgentClient, endpoint: str, count: int) -> AgentStatus:
    """Wait until the agent reports ``count`` busy slots; its status then."""
    found: list[AgentStatus] = []

    async def reached() -> bool:
        status = await client.status(endpoint, TOKEN)
        found[:] = [status] if status is not None else []
        return status is not None and status.busy_slots == count

    await wait_until(reached, what=f"{count} busy slots")
    return found[0]


async def test_async_handler_serves_every_slot_at_once_and_refuses_one_more(
    serve: Callable[[Agent, int], Any], client: AgentClient
) -> None:
    """Four items on an agent of four slots all run at once (/status lists them); a fifth
    gets 409 Busy; once one finishes, a slot is free again."""
    release = asyncio.Event()

    async def handler(item: Any, input: Any, context: Context) -> Any:
        await release.wait()
        return item

    endpoint = await serve(Agent(handler, name="async-slots"), 4)
    calls = [
        asyncio.create_task(client.invoke(endpoint, TOKEN, envelope(f"i{n}"), timeout=60))
        for n in range(4)
    ]
    status = await busy_slots(client, endpoint, 4)
    assert (status.busy, status.slots, sorted(status.items)) == (True, 4, ["i0", "i1", "i2", "i3"])
    refused = await client.invoke(endpoint, TOKEN, envelope("i4"), timeout=10)
    assert (refused.ok, refused.reason, refused.status_code) == (False, "Busy", 409)
    assert "4 slots" in refused.message
    release.set()
    results = await asyncio.gather(*calls)
    assert [result.output for result in results] == ["i0", "i1", "i2", "i3"]
    status = await busy_slots(client, endpoint, 0)
    assert (status.busy, status.items, status.uses) == (False, (), 4)


async def test_sync_handler_runs_on_a_thread_per_slot(
    serve: Callable[[Agent, int], Any], client: AgentClient
) -> None:
    """Three sync items meet at a barrier of three inside the handler: they can only pass it if
    they run at the same time, on three threads."""
    barrier = threading.Barrier(3, timeout=30)

    def handler(item: Any, input: Any, context: Context) -> Any:
        barrier.wait()
        return threading.current_thread().name

    endpoint = await serve(Agent(handler, name="sync-slots"), 3)
    results = await asyncio.gather(
        *(client.invoke(endpoint, TOKEN, envelope(f"s{n}"), timeout=60) for n in range(3))
    )
    assert all(result.ok for result in results), results
    assert len({result.output for result in results}) == 3


async def test_reset_waits_for_no_slot_busy(
    serve: Callable[[Agent, int], Any], client: AgentClient
) -> None:
    """With one slot of two busy a reset is refused; once both are free it runs."""
    release = asyncio.Event()
    resets: list[int] = []

    async def handler(item: Any, input: Any, context: Context) -> Any:
        await release.wait()
        return item

    async def reset(state: Any) -> None:
        resets.append(1)

    endpoint = await serve(Agent(handler, reset=reset, name="reset-slots"), 2)
    call = asyncio.create_task(client.invoke(endpoint, TOKEN, envelope("r1"), timeout=60))
    await busy_slots(client, endpoint, 1)
    assert not await client.reset(endpoint, TOKEN)
    release.set()
    assert (await call).ok
    await busy_slots(client, endpoint, 0)
    assert await client.reset(endpoint, TOKEN)
    assert resets == [1]


@pytest.mark.parametrize(
    ("raw", "slots"),
    [(None, 1), ("1", 1), ("8", 8), ("0", None), ("-2", None), ("four", None), ("", None)],
)
def test_slot_count_comes_from_the_pod(raw: str | None, slots: int | None) -> None:
    """AGENTPOOL_SLOTS, which the operator sets from the pool, gives the count; 1 when unset; a
    value that is no count refuses to start with a message naming the variable."""
    env = {"AGENTPOOL_TOKEN": "t"}
    if raw is not None:
        env["AGENTPOOL_SLOTS"] = raw
    if slots is None:
        with pytest.raises(ConfigError, match="AGENTPOOL_SLOTS"):
            Settings.from_env(env)
    else:
        assert Settings.from_env(env).slots == slots
