"""Every answer an agent gives a call is counted in its pool's health: answers outside the agent
protocol, in a row, turn the pool Degraded and wake its loop to say so; one in it turns it back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import cast

import pytest

from agentpool.broker import Broker
from agentpool.handlers.checkins import call_held
from agentpool.handlers.runtime import PoolHandle, Runtime
from agentpool.io.agents import AgentClient
from agentpool.io.kube import Kube
from agentpool.pool import ObservedAgent, PoolPolicy
from agentpool.settings import PoolSettings
from loopback import read_request

ENVELOPE = {"id": "a", "item": 1, "input": None, "attempt": 1, "run": "r"}
PAGE = b"<!DOCTYPE HTML><title>Error response</title><p>Error code: 404</p>"
OUTPUT = b'{"output": "done"}'


class Server:
    """Answers each ``POST /invoke`` with ``answer``: a web server's 404 page at first."""

    def __init__(self) -> None:
        self.answer = (404, PAGE)
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await read_request(reader):
                status, body = self.answer
                writer.write(
                    b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body)
                )
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def served() -> AsyncIterator[tuple[Server, Runtime, PoolHandle]]:
    server = Server()
    listening = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    server.port = listening.sockets[0].getsockname()[1]
    policy = PoolPolicy(min_size=1, max_size=1, port=server.port)
    broker = Broker("p", policy, clock=lambda: 100.0)
    broker.update_agents(
        [ObservedAgent(name="a", created_at=0.0, ready=True, ready_at=1.0, ip="127.0.0.1")]
    )
    async with listening, AgentClient() as agents:
        runtime = Runtime(kube=cast(Kube, None), agents=agents)
        handle = PoolHandle(
            namespace="ns", name="p", broker=broker, port=server.port, wake=asyncio.Event()
        )
        yield server, runtime, handle


async def test_answers_outside_the_protocol_turn_the_pool_and_wake_it(
    served: tuple[Server, Runtime, PoolHandle],
) -> None:
    """The fifth 404 page in a row wakes the pool's loop (not the first four, so a stray page
    costs no pass); an output then ends the run of them and wakes it again."""
    server, runtime, handle = served
    threshold = PoolSettings().outside_protocol_answers
    for number in range(1, threshold + 2):
        checkout = await handle.broker.checkout(timeout=1, priority=0, holder="r")
        result = await call_held(runtime, handle, checkout, dict(ENVELOPE), timeout=5, cast=False)
        handle.broker.checkin(checkout, "failure")
        assert result is not None
        assert result.reason == "BadResponse"
        assert handle.health.outside_protocol == number
        assert handle.wake.is_set() is (number >= threshold)
    assert handle.health.last_outside is not None
    assert "POST /invoke with HTTP 404" in handle.health.last_outside.message

    handle.wake.clear()
    server.answer = (200, OUTPUT)
    checkout = await handle.broker.checkout(timeout=1, priority=0, holder="r")
    result = await call_held(runtime, handle, checkout, dict(ENVELOPE), timeout=5, cast=False)
    assert result is not None
    assert result.ok
    assert (handle.health.outside_protocol, handle.health.last_outside) == (0, None)
    assert handle.wake.is_set()
