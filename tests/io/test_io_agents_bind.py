"""The agent client's side of a lease's binding: what ``POST /bind`` and ``/unbind`` send, and
what every kind of answer (or none) comes to, without the lease's token in any word of it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from agentpool.io.agents import AgentClient

POOL_TOKEN = "pool-token-5b1e"
LEASE_TOKEN = "lease-token-9f3a"
BIND = {"lease": "chat", "lease_token": LEASE_TOKEN, "expire_time": "2026-01-01T00:05:00Z"}


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class ScriptedAgent:
    """Answers each request with the (status, body) scripted for its path; None hangs."""

    answers: dict[str, tuple[int, bytes] | None] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                lines = head.decode().split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {
                    name.strip().lower(): value.strip()
                    for name, _, value in (line.partition(":") for line in lines[1:] if line)
                }
                raw = await reader.readexactly(int(headers.get("content-length", "0")))
                self.requests.append(Request(method, path, headers, json.loads(raw or b"null")))
                answer = self.answers.get(path, (404, b"404: Not Found"))
                if answer is None:
                    await asyncio.Event().wait()
                    return
                status, body = answer
                writer.write(
                    b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def agent() -> AsyncIterator[ScriptedAgent]:
    scripted = ScriptedAgent()
    server = await asyncio.start_server(scripted.handle, "127.0.0.1", 0)
    scripted.port = server.sockets[0].getsockname()[1]
    async with server:
        yield scripted


async def test_bind_hands_over_the_leases_token_with_the_pools(agent: ScriptedAgent) -> None:
    """The operator authenticates with the pool's token; the lease's own token, its expiry and
    its context travel in the body; a 200 is a binding."""
    agent.answers["/bind"] = (200, b'{"lease": "chat", "expireTime": "2026-01-01T00:05:00Z"}')
    context = {"session": "s-1", "items": [1, None, "é"]}
    async with AgentClient() as client:
        answer = await client.bind(
            f"http://127.0.0.1:{agent.port}", POOL_TOKEN, context=context, **BIND
        )
    assert (answer.ok, answer.status_code) == (True, 200)
    [request] = agent.requests
    assert (request.method, request.path) == ("POST", "/bind")
    assert request.headers["authorization"] == f"Bearer {POOL_TOKEN}"
    assert request.body == {
        "lease": "chat",
        "token": LEASE_TOKEN,
        "expireTime": "2026-01-01T00:05:00Z",
        "context": context,
    }


@pytest.mark.parametrize(
    ("answer", "status_code", "reason"),
    [
        ((404, b"404: Not Found"), 404, "BadResponse"),
        ((405, b"405: Method Not Allowed"), 405, "BadResponse"),
        ((501, b'{"error": {"reason": "NotImplemented", "message": "no"}}'), 501, "NotImplemented"),
        (
            (409, b'{"error": {"reason": "AlreadyBound", "message": "bound to a"}}'),
            409,
            "AlreadyBound",
        ),
        ((500, b'{"error": {"reason": "BindFailed", "message": "no model"}}'), 500, "BindFailed"),
    ],
)
async def test_a_refused_bind_says_how(
    agent: ScriptedAgent, answer: tuple[int, bytes], status_code: int, reason: str
) -> None:
    """A refusal comes back with the HTTP status and the agent's reason, for the lease to judge;
    the lease's token is in none of it."""
    agent.answers["/bind"] = answer
    async with AgentClient() as client:
        found = await client.bind(
            f"http://127.0.0.1:{agent.port}", POOL_TOKEN, context=None, **BIND
        )
    assert (found.ok, found.status_code, found.reason) == (False, status_code, reason)
    if reason == "BadResponse":
        assert f"answered POST /bind with HTTP {status_code}" in found.message
    assert LEASE_TOKEN not in found.message
    assert POOL_TOKEN not in found.message


async def test_a_bind_without_answer_has_no_status(agent: ScriptedAgent) -> None:
    """An agent that never answers, or is not there, gives no status: its state is unknown."""
    agent.answers["/bind"] = None
    async with AgentClient() as client:
        endpoint = f"http://127.0.0.1:{agent.port}"
        silent = await client.bind(endpoint, POOL_TOKEN, context=None, timeout=0.2, **BIND)
        gone = await client.bind("http://127.0.0.1:9", POOL_TOKEN, context=None, **BIND)
    assert (silent.ok, silent.status_code, silent.reason) == (False, None, "CallTimeout")
    assert (gone.ok, gone.status_code, gone.reason) == (False, None, "AgentLost")
    assert "refused" in gone.message
    for found in (silent, gone):
        assert LEASE_TOKEN not in found.message


@pytest.mark.parametrize(
    ("answer", "unbound"),
    [
        ((200, b"{}"), True),
        ((500, b'{"error": {"reason": "UnbindFailed", "message": "reset raised"}}'), False),
        ((404, b"404: Not Found"), False),
        (None, False),
    ],
)
async def test_unbind_takes_the_lease_back_or_says_it_could_not(
    agent: ScriptedAgent, answer: tuple[int, bytes] | None, unbound: bool
) -> None:
    """``POST /unbind`` names the lease and carries the pool's token; anything but a 200 (or no
    answer in time) is False: the agent is to be retired."""
    agent.answers["/unbind"] = answer
    # An agent that answers is waited for as long as a loaded machine needs; one that never
    # answers long enough for the request to reach it.
    timeout = 30.0 if answer is not None else 2.0
    async with AgentClient() as client:
        found = await client.unbind(
            f"http://127.0.0.1:{agent.port}", POOL_TOKEN, lease="chat", timeout=timeout
        )
    assert found is unbound
    [request] = agent.requests
    assert (request.path, request.body) == ("/unbind", {"lease": "chat"})
    assert request.headers["authorization"] == f"Bearer {POOL_TOKEN}"


async def test_unbinding_an_agent_that_is_gone_is_false() -> None:
    async with AgentClient() as client:
        assert await client.unbind("http://127.0.0.1:9", POOL_TOKEN, lease="chat") is False
