"""The operator's agent client against servers that break the protocol in ways agents might."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from agentpool.io.agents import AgentClient

TOKEN = "client-test-token-5f1e"


async def _garbled(request: web.Request) -> web.Response:
    return web.Response(status=502, text="<html>bad gateway</html>", content_type="text/html")


async def _wrong_shape(request: web.Request) -> web.Response:
    return web.json_response({"result": 1})


async def _hang_up(request: web.Request) -> web.Response:
    assert request.transport is not None
    request.transport.close()
    return web.Response()


@pytest.fixture
async def endpoint() -> AsyncIterator[str]:
    """A server on 127.0.0.1 whose paths each misbehave differently."""
    app = web.Application()
    app.router.add_post("/garbled/invoke", _garbled)
    app.router.add_get("/garbled/status", _garbled)
    app.router.add_post("/garbled/reset", _garbled)
    app.router.add_post("/shape/invoke", _wrong_shape)
    app.router.add_get("/shape/status", _wrong_shape)
    app.router.add_post("/hangup/invoke", _hang_up)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


async def test_answers_outside_the_protocol_are_bad_responses(endpoint: str) -> None:
    """A non-JSON error page or a 200 without output is BadResponse; the agent is not lost."""
    envelope = {"id": "a", "item": 1, "input": None, "attempt": 1, "run": None}
    async with AgentClient() as client:
        garbled = await client.invoke(endpoint + "/garbled", TOKEN, envelope, timeout=5)
        shaped = await client.invoke(endpoint + "/shape", TOKEN, envelope, timeout=5)
        assert await client.status(endpoint + "/garbled", TOKEN) is None
        assert await client.status(endpoint + "/shape", TOKEN) is None
        assert not await client.reset(endpoint + "/garbled", TOKEN)
    assert (garbled.ok, garbled.reason, garbled.status_code, garbled.lost) == (
        False,
        "BadResponse",
        502,
        False,
    )
    assert "HTTP 502" in garbled.message
    assert "bad gateway" in garbled.message
    assert (shaped.ok, shaped.reason, shaped.status_code) == (False, "BadResponse", 200)
    for result in (garbled, shaped):
        assert TOKEN not in result.message


async def test_a_bad_response_names_the_request_and_where_the_protocol_is(endpoint: str) -> None:
    """A 404 page on ``/invoke`` (a web server on the pool's port, say) is reported as the
    answer to ``POST /invoke``, with the page of the manual that says what the operator expects,
    so the reader knows the agent speaks something else rather than failing items."""
    envelope = {"id": "a", "item": 1, "input": None, "attempt": 1, "run": None}
    async with AgentClient() as client:
        missing = await client.invoke(endpoint + "/nothing", TOKEN, envelope, timeout=5)
    assert (missing.reason, missing.status_code) == ("BadResponse", 404)
    assert "answered POST /invoke with HTTP 404" in missing.message
    assert "see the agent protocol: docs/reference/protocol.md" in missing.message


async def test_connection_dropped_mid_call_is_agent_lost(endpoint: str) -> None:
    """A connection closed before the answer is AgentLost, lost, and says so without the token."""
    envelope = {"id": "a", "item": 1, "input": None, "attempt": 1, "run": None}
    async with AgentClient() as client:
        result = await client.invoke(endpoint + "/hangup", TOKEN, envelope, timeout=5)
    assert (result.ok, result.reason, result.lost) == (False, "AgentLost", True)
    assert "closed before an answer" in result.message
    assert TOKEN not in result.message


async def test_unserialisable_envelope_is_refused_before_sending(endpoint: str) -> None:
    """An envelope that is not JSON fails as BadRequest without touching the agent."""
    async with AgentClient() as client:
        result = await client.invoke(endpoint, TOKEN, {"id": "a", "item": {1, 2}}, timeout=5)
    assert (result.ok, result.reason, result.status_code, result.lost) == (
        False,
        "BadRequest",
        None,
        False,
    )
