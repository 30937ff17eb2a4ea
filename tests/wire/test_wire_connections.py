"""The lean invoke transport reads every HTTP/1.1 answer shape an agent's server may send."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from agentpool.io.agents import AgentClient
from agentpool.wire.connections import WireError, WirePool

TOKEN = "wire-test-token-7c2d"
ENVELOPE = {"id": "a", "item": 1, "input": None, "attempt": 1, "run": "r"}
HEAD = b"POST /invoke HTTP/1.1\r\nHost: test\r\n"

ANSWERS = {
    "length": b'HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n{"output": 1}',
    "chunked": (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'5\r\n{"out\r\n8;ext=1\r\nput": 1}\r\n0\r\nX-Trailer: t\r\n\r\n'
    ),
    "close": b'HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{"output": 1}',
    "garbage": b"SMTP ready\r\n\r\n",
    "endless": b"HTTP/1.1 200 OK\r\n" + b"X-Filler: 0123456789abcdef\r\n" * 4000,
}


class CannedServer:
    """Answers each request on a connection with the canned answer named by its path."""

    def __init__(self) -> None:
        self.connections = 0
        self.server: asyncio.Server | None = None
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                request_line = await reader.readline()
                if not request_line:
                    return
                length = 0
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    name, _, value = line.partition(b":")
                    if name.lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                shape = request_line.split()[1].strip(b"/").split(b"/")[0].decode()
                writer.write(ANSWERS[shape])
                await writer.drain()
                if shape in ("close", "garbage", "endless"):
                    return
        finally:
            writer.close()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]


@pytest.fixture
async def canned() -> AsyncIterator[CannedServer]:
    server = CannedServer()
    await server.start()
    yield server
    assert server.server is not None
    server.server.close()
    await server.server.wait_closed()


@pytest.mark.parametrize("shape", ["length", "chunked", "close"])
async def test_every_framing_gives_the_output(canned: CannedServer, shape: str) -> None:
    """Content-Length, chunked (with an extension and a trailer) and read-to-close all parse."""
    async with AgentClient() as client:
        endpoint = f"http://127.0.0.1:{canned.port}/{shape}"
        results = [await client.invoke(endpoint, TOKEN, ENVELOPE, timeout=5) for _ in range(3)]
    assert [(r.ok, r.output, r.status_code) for r in results] == [(True, 1, 200)] * 3


async def test_connections_are_kept_unless_the_agent_closes_them(canned: CannedServer) -> None:
    """Kept-alive answers reuse one connection; after a Connection: close answer a new one opens.

    The first close-answered call still rides the kept connection, so three of them add two.
    """
    async with AgentClient() as client:
        for _ in range(3):
            await client.invoke(
                f"http://127.0.0.1:{canned.port}/length", TOKEN, ENVELOPE, timeout=5
            )
        kept = canned.connections
        for _ in range(3):
            await client.invoke(f"http://127.0.0.1:{canned.port}/close", TOKEN, ENVELOPE, timeout=5)
    assert (kept, canned.connections) == (1, 3)


async def test_an_answer_that_is_not_http_loses_the_agent(canned: CannedServer) -> None:
    """A garbled stream is AgentLost: the agent's state cannot be known from it."""
    async with AgentClient() as client:
        endpoint = f"http://127.0.0.1:{canned.port}/garbage"
        result = await client.invoke(endpoint, TOKEN, ENVELOPE, timeout=5)
    assert (result.ok, result.reason, result.lost) == (False, "AgentLost", True)
    assert "not HTTP/1.1" in result.message
    assert TOKEN not in result.message


async def test_an_answer_whose_head_never_ends_loses_the_agent(canned: CannedServer) -> None:
    """Headers past 64 KiB are not buffered without end: the call fails at once as AgentLost,
    saying why, rather than at its timeout."""
    async with AgentClient() as client:
        endpoint = f"http://127.0.0.1:{canned.port}/endless"
        result = await client.invoke(endpoint, TOKEN, ENVELOPE, timeout=60)
    assert (result.ok, result.reason, result.lost) == (False, "AgentLost", True)
    assert "head is over 65536 bytes" in result.message


async def test_nothing_listening_is_agent_lost_with_the_reason(canned: CannedServer) -> None:
    """A refused connection says so, as the agent having exited."""
    assert canned.server is not None
    canned.server.close()
    await canned.server.wait_closed()
    async with AgentClient() as client:
        result = await client.invoke(f"http://127.0.0.1:{canned.port}", TOKEN, ENVELOPE, timeout=5)
    assert (result.ok, result.reason, result.lost) == (False, "AgentLost", True)
    assert "refused" in result.message


async def test_the_pool_raises_on_a_bad_status_line(canned: CannedServer) -> None:
    """The transport itself refuses what is not an HTTP/1.1 answer rather than guessing."""
    pool = WirePool()
    try:
        with pytest.raises(WireError):
            await pool.request("127.0.0.1", canned.port, b"POST /garbage HTTP/1.1\r\n", b"")
    finally:
        pool.close()


async def test_idle_connections_to_agents_no_longer_called_are_closed(
    canned: CannedServer,
) -> None:
    """A connection to an agent that is not called again (retired, scaled down) is closed once
    it has been idle past the keep-alive period, on a later call to another agent."""
    other = CannedServer()
    await other.start()
    now = [0.0]
    pool = WirePool(idle_seconds=15.0, clock=lambda: now[0])
    try:
        await pool.request("127.0.0.1", other.port, b"POST /length HTTP/1.1\r\nHost: t\r\n", b"")
        await pool.request("127.0.0.1", canned.port, b"POST /length HTTP/1.1\r\nHost: t\r\n", b"")
        assert pool.kept == 2
        now[0] = 10.0
        await pool.request("127.0.0.1", canned.port, b"POST /length HTTP/1.1\r\nHost: t\r\n", b"")
        assert pool.kept == 2, "not idle long enough yet"
        now[0] = 20.0
        await pool.request("127.0.0.1", canned.port, b"POST /length HTTP/1.1\r\nHost: t\r\n", b"")
        assert pool.kept == 1, "the idle connection to the other agent was closed"
        assert canned.connections == 1, "the agent called all along kept its connection"
    finally:
        pool.close()
        assert other.server is not None
        other.server.close()
        await other.server.wait_closed()
