"""Sessions pinned to one agent, with no API object: the ``mcp`` SDK's client against a pool of its
own server (``examples/http/mcp_server.py``), through the gateway.

Two sessions at once each keep to their own agent (a session's notes live in the server process
that began it), hold it while they are open and give it back when the client ends them; a request
naming a session the pool does not hold, ended by its idle timeout or by the loss of its agent,
is answered 404, which is what an MCP client expects before it begins again.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx2
import mcp.types
import pytest
import yaml
from gateway_support import Gateway, caller_token
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from operator_support import Api
from pool_support import pool_status

from cluster import wait_for

pytestmark = [pytest.mark.cluster]

REPO = Path(__file__).resolve().parents[2]
IDLE_SECONDS = 8


def notes_pool(api: Api, namespace: str) -> None:
    manifest = yaml.safe_load((REPO / "examples" / "http" / "mcp-pool.yaml").read_text())
    spec: dict[str, Any] = manifest["spec"]
    spec["sessions"]["idleTimeoutSeconds"] = IDLE_SECONDS
    api.create("agentpools", namespace, "notes", spec)
    wait_for(lambda: available(api, namespace) == 2, 120, message="two MCP servers available")


def available(api: Api, namespace: str) -> int:
    return int(pool_status(api, namespace, "notes").get("available") or 0)


def endpoint(gateway: Gateway) -> str:
    return f"{gateway.url}/v1/namespaces/{gateway.namespace}/agentpools/notes/proxy/mcp"


def http(gateway: Gateway, token: str) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        verify=gateway.context(), headers={"Authorization": f"Bearer {token}"}, timeout=60
    )


def text(result: mcp.types.CallToolResult) -> Any:
    assert not result.is_error, result
    return (result.structured_content or {})["result"]


async def a_session(gateway: Gateway, token: str, notes: list[str], both: asyncio.Barrier) -> Any:
    """One MCP session: keeps its notes, reads them back, names its server; waits at ``both``
    while open, so two sessions are open at once."""
    async with (
        http(gateway, token) as client,
        streamable_http_client(endpoint(gateway), http_client=client) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        for note in notes:
            await session.call_tool("remember", {"note": note})
        await both.wait()
        recalled = text(await session.call_tool("recall", {}))
        server = text(await session.call_tool("whoami", {}))
        return recalled, server


def test_two_mcp_sessions_each_keep_to_their_own_agent(api: Api, namespace: str) -> None:
    notes_pool(api, namespace)
    gateway = Gateway.of(api, namespace)
    token = caller_token(api, namespace, "mcp", bound=True)

    async def both() -> list[Any]:
        meeting = asyncio.Barrier(2)
        return await asyncio.gather(
            a_session(gateway, token, ["a1", "a2", "a3"], meeting),
            a_session(gateway, token, ["b1", "b2"], meeting),
        )

    (a_notes, a_server), (b_notes, b_server) = asyncio.run(both())
    # Every request of a session reached the server that began it: its notes are all there.
    assert (a_notes, b_notes) == (["a1", "a2", "a3"], ["b1", "b2"])
    assert a_server != b_server
    # The clients ended their sessions (a DELETE each): both agents are free again.
    wait_for(lambda: available(api, namespace) == 2, 30, message="both agents given back")


def test_a_session_ended_or_lost_is_answered_404(api: Api, namespace: str) -> None:
    notes_pool(api, namespace)
    gateway = Gateway.of(api, namespace)
    token = caller_token(api, namespace, "raw", bound=True)

    async def post(body: dict[str, Any], session: str | None = None) -> httpx2.Response:
        headers = {"Accept": "application/json, text/event-stream"}
        if session is not None:
            headers["Mcp-Session-Id"] = session
        async with http(gateway, token) as client:
            return await client.post(endpoint(gateway), json=body, headers=headers)

    def initialize() -> tuple[str, str]:
        params = {
            "protocolVersion": mcp.types.LATEST_PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        }
        answer = asyncio.run(
            post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})
        )
        assert answer.status_code == 200, answer.text
        return answer.headers["mcp-session-id"], answer.headers["agentpool-agent"]

    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    unknown = asyncio.run(post(ping, session="no-such-session"))
    assert unknown.status_code == 404
    assert unknown.json()["error"]["reason"] == "SessionNotFound"

    # Idle past its timeout, a session ends and its agent goes back.
    session, _ = initialize()
    wait_for(lambda: available(api, namespace) == 1, 10, message="one agent held by the session")
    wait_for(lambda: available(api, namespace) == 2, IDLE_SECONDS + 30, message="idle session end")
    assert asyncio.run(post(ping, session=session)).status_code == 404

    # A session whose agent is lost ends with it.
    session, agent = initialize()
    api.core.delete_namespaced_pod(agent, namespace, grace_period_seconds=0)
    wait_for(
        lambda: asyncio.run(post(ping, session=session)).status_code == 404,
        60,
        message="the lost agent's session answered 404",
    )
