"""The agent protocol end to end: real agent processes, called through ``agentpool.io.agents``."""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
from pathlib import Path

import aiohttp
from agent_processes import EXAMPLES, FIXTURES, Spawn, wait_for, wait_until

from agentpool.io.agents import AgentClient

GATED = f"{FIXTURES}:gated"
ECHO = f"{EXAMPLES / 'echo.py'}:agent"


def envelope(item_id: str, item: object, *, attempt: int = 1) -> dict[str, object]:
    return {"id": item_id, "item": item, "input": None, "attempt": attempt, "run": "test-run"}


async def test_readiness_waits_for_startup(
    spawn: Spawn, client: AgentClient, tmp_path: Path
) -> None:
    """/healthz answers 503 and /invoke NotReady until start-up ends, then 200 and work is done."""
    gate = tmp_path / "startup-gate"
    agent = await spawn(GATED, env={"STARTUP_GATE": str(gate)})
    assert not await client.ready(agent.endpoint)
    refused = await client.invoke(agent.endpoint, agent.token, envelope("a", 1), timeout=10)
    assert (refused.ok, refused.reason, refused.status_code) == (False, "NotReady", 503)
    status = await client.status(agent.endpoint, agent.token)
    assert status is not None
    assert not status.ready

    gate.touch()
    await wait_until(lambda: client.ready(agent.endpoint), what="the agent to become ready")
    result = await client.invoke(agent.endpoint, agent.token, envelope("a", 1), timeout=10)
    assert result.ok, result
    assert result.output == {"id": "a", "count": 1, "uses": 1}


async def test_slow_start_output_is_deterministic(spawn: Spawn, client: AgentClient) -> None:
    """The slow_start example gets ready after its start-up and answers with the item's digest."""
    env = {"SLOW_START_SECONDS": "0.2", "WORK_SECONDS": "0"}
    agent = await spawn(f"{EXAMPLES / 'slow_start.py'}:agent", env=env)
    await wait_until(lambda: client.ready(agent.endpoint), what="slow_start to become ready")
    item = {"b": [1, 2], "a": "x", "outputBytes": 100}
    result = await client.invoke(agent.endpoint, agent.token, envelope("i1", item), timeout=10)
    canonical = json.dumps(item, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    assert result.ok, result
    assert result.output["digest"] == digest
    assert result.output["length"] == len(canonical)
    assert len(result.output["padding"]) == 100
    failed = await client.invoke(
        agent.endpoint, agent.token, envelope("i2", {"fail": True, "message": "bad"}), timeout=10
    )
    assert (failed.reason, failed.message) == ("HandlerError", "ValueError: bad")


async def test_requests_without_the_token_get_401(spawn: Spawn, client: AgentClient) -> None:
    """Invoke, status and reset demand the bearer token; only the readiness probe does not."""
    agent = await spawn(ECHO)
    await wait_until(lambda: client.ready(agent.endpoint), what="echo to become ready")
    for token in ("", "wrong-token", agent.token + "x"):
        result = await client.invoke(agent.endpoint, token, envelope("a", 1), timeout=10)
        assert (result.ok, result.reason, result.status_code) == (False, "Unauthorized", 401)
        assert await client.status(agent.endpoint, token) is None
        assert not await client.reset(agent.endpoint, token)
    async with aiohttp.ClientSession() as session:
        for method, path in (("POST", "/invoke"), ("GET", "/status"), ("POST", "/reset")):
            async with session.request(method, agent.endpoint + path, json={}) as response:
                assert response.status == 401, path
    status = await client.status(agent.endpoint, agent.token)
    assert status is not None
    assert status.uses == 0


async def test_the_bearer_scheme_is_case_insensitive(spawn: Spawn) -> None:
    """HTTP auth schemes are case-insensitive (RFC 9110): ``bearer`` or ``BEARER`` with the right
    token is let in, as ``Bearer`` is; the token itself is compared exactly."""
    agent = await spawn(ECHO)
    async with aiohttp.ClientSession() as session:
        for header, expected in (
            (f"bearer {agent.token}", 200),
            (f"BEARER  {agent.token}", 200),
            (f"Bearer {agent.token.upper()}x", 401),
            (f"Basic {agent.token}", 401),
        ):
            headers = {"Authorization": header}
            async with session.get(agent.endpoint + "/status", headers=headers) as response:
                assert response.status == expected, header


async def test_busy_agent_answers_409(spawn: Spawn, client: AgentClient, tmp_path: Path) -> None:
    """While one item runs, /status reports it and a second invoke gets 409 Busy."""
    agent = await spawn(GATED)
    await wait_until(lambda: client.ready(agent.endpoint), what="the agent to become ready")
    gate = tmp_path / "item-gate"
    first = asyncio.create_task(
        client.invoke(
            agent.endpoint, agent.token, envelope("first", {"gate": str(gate)}), timeout=60
        )
    )

    async def busy_with_first() -> bool:
        status = await client.status(agent.endpoint, agent.token)
        return status is not None and status.busy and status.current == "first"

    await wait_until(busy_with_first, what="the agent to report the first item")
    second = await client.invoke(agent.endpoint, agent.token, envelope("second", 2), timeout=10)
    assert (second.ok, second.reason, second.status_code, second.lost) == (
        False,
        "Busy",
        409,
        False,
    )
    assert "first" in second.message
    gate.touch()
    result = await first
    assert result.ok
    assert result.output == {"id": "first", "count": 1, "uses": 1}
    status = await client.status(agent.endpoint, agent.token)
    assert status is not None
    assert (status.busy, status.current, status.uses) == (False, None, 1)


async def test_handler_exception_is_a_handler_error(spawn: Spawn, client: AgentClient) -> None:
    """A handler that raises fails only its item, with reason HandlerError and the exception."""
    agent = await spawn(f"{EXAMPLES / 'flaky.py'}:agent")
    await wait_until(lambda: client.ready(agent.endpoint), what="flaky to become ready")
    always = {"fail": True, "message": "the model refused"}
    result = await client.invoke(agent.endpoint, agent.token, envelope("x", always), timeout=10)
    assert (result.ok, result.reason, result.message) == (
        False,
        "HandlerError",
        "RuntimeError: the model refused",
    )
    assert (result.status_code, result.lost) == (500, False)
    once = {"failTimes": 1}
    first = await client.invoke(agent.endpoint, agent.token, envelope("y", once), timeout=10)
    assert first.reason == "HandlerError"
    assert "attempt 1" in first.message
    second = await client.invoke(
        agent.endpoint, agent.token, envelope("y", once, attempt=2), timeout=10
    )
    assert second.ok
    assert second.output["attempt"] == 2
    status = await client.status(agent.endpoint, agent.token)
    assert status is not None
    assert (status.busy, status.uses) == (False, 3)


async def test_handler_error_names_the_exception_and_logs_its_traceback(
    spawn: Spawn, client: AgentClient
) -> None:
    """A handler's KeyError('n') fails the item as "KeyError: 'n'", not a bare "'n'", and the
    agent's stderr, which `kubectl logs` shows, holds the traceback down to the handler's line."""
    agent = await spawn(GATED)
    await wait_until(lambda: client.ready(agent.endpoint), what="the agent to become ready")
    result = await client.invoke(
        agent.endpoint, agent.token, envelope("k", {"lookup": "n"}), timeout=10
    )
    assert (result.ok, result.reason, result.message) == (False, "HandlerError", "KeyError: 'n'")
    await wait_for(
        lambda: "KeyError: 'n'" in agent.stderr.read_text(), what="the traceback on stderr"
    )
    traceback = agent.stderr.read_text()
    assert "Traceback (most recent call last)" in traceback
    assert 'return {"value": context.state[asks["lookup"]]}' in traceback
    assert '"k"' in traceback  # which item it was
    assert "Traceback" not in agent.stdout.read_text()  # stdout stays one line per record


async def test_bad_envelope_is_a_bad_request(spawn: Spawn, client: AgentClient) -> None:
    """A body without an item, or that is not JSON, gets 400 BadRequest and uses nothing up."""
    agent = await spawn(ECHO)
    await wait_until(lambda: client.ready(agent.endpoint), what="echo to become ready")
    result = await client.invoke(agent.endpoint, agent.token, {"id": "a"}, timeout=10)
    assert (result.reason, result.status_code) == ("BadRequest", 400)
    assert "item" in result.message
    headers = {"Authorization": f"Bearer {agent.token}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(agent.endpoint + "/invoke", data=b"{not json", headers=headers) as response,
    ):
        body = await response.json()
    assert response.status == 400
    assert body["error"]["reason"] == "BadRequest"
    status = await client.status(agent.endpoint, agent.token)
    assert status is not None
    assert status.uses == 0


async def test_aiohttps_own_refusals_come_in_the_protocols_shape(
    spawn: Spawn, client: AgentClient
) -> None:
    """A wrong method or an unknown path is refused with the protocol's JSON error, not
    aiohttp's text page, so the operator never takes an SDK agent for a server that speaks
    something else (BadResponse, OutsideProtocol)."""
    agent = await spawn(ECHO)
    await wait_until(lambda: client.ready(agent.endpoint), what="echo to become ready")
    headers = {"Authorization": f"Bearer {agent.token}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        for method, path, status in (("GET", "/invoke", 405), ("POST", "/nowhere", 404)):
            async with session.request(method, agent.endpoint + path) as response:
                assert response.status == status
                assert response.content_type == "application/json"
                body = await response.json()
            assert body["error"]["reason"] == "BadRequest", body
            assert body["error"]["message"], body


async def test_reset(spawn: Spawn, client: AgentClient) -> None:
    """/reset returns the agent to a fresh state; a failing reset is reported as a failure."""
    agent = await spawn(GATED)
    await wait_until(lambda: client.ready(agent.endpoint), what="the agent to become ready")
    for item_id in ("a", "b"):
        await client.invoke(agent.endpoint, agent.token, envelope(item_id, {}), timeout=10)
    assert await client.reset(agent.endpoint, agent.token)
    result = await client.invoke(agent.endpoint, agent.token, envelope("c", {}), timeout=10)
    assert result.output == {"id": "c", "count": 1, "uses": 3}
    await client.invoke(
        agent.endpoint, agent.token, envelope("d", {"breakReset": True}), timeout=10
    )
    assert not await client.reset(agent.endpoint, agent.token)
    headers = {"Authorization": f"Bearer {agent.token}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(agent.endpoint + "/reset", headers=headers) as response,
    ):
        body = await response.json()
    assert response.status == 500
    assert body["error"] == {
        "reason": "ResetFailed",
        "message": "RuntimeError: the reset broke on purpose",
    }


async def test_agent_without_reset_answers_501(spawn: Spawn, client: AgentClient) -> None:
    """An agent with no reset function says so (501), which the client counts as reset."""
    agent = await spawn(ECHO)
    await wait_until(lambda: client.ready(agent.endpoint), what="echo to become ready")
    headers = {"Authorization": f"Bearer {agent.token}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(agent.endpoint + "/reset", headers=headers) as response,
    ):
        body = await response.json()
    assert response.status == 501
    assert body["error"]["reason"] == "ResetUnsupported"
    assert await client.reset(agent.endpoint, agent.token)


async def test_cast_answers_202_and_reports_busy_until_done(
    spawn: Spawn, client: AgentClient, tmp_path: Path
) -> None:
    """A cast is accepted at once; /status shows the item busy until it ends, then idle."""
    agent = await spawn(GATED)
    await wait_until(lambda: client.ready(agent.endpoint), what="the agent to become ready")
    gate = tmp_path / "cast-gate"
    item = envelope("cast-1", {"gate": str(gate)})
    accepted = await client.invoke(agent.endpoint, agent.token, item, timeout=10, cast=True)
    assert (accepted.ok, accepted.status_code, accepted.output) == (True, 202, None)
    status = await client.status(agent.endpoint, agent.token)
    assert status is not None
    assert (status.busy, status.current) == (True, "cast-1")
    refused = await client.invoke(agent.endpoint, agent.token, envelope("b", 1), timeout=10)
    assert refused.reason == "Busy"
    gate.touch()

    async def idle() -> bool:
        status = await client.status(agent.endpoint, agent.token)
        return status is not None and not status.busy

    await wait_until(idle, what="the cast item to finish")
    status = await client.status(agent.endpoint, agent.token)
    assert status is not None
    assert (status.current, status.uses) == (None, 1)
    await wait_until(
        lambda: asyncio.to_thread(lambda: 'id="cast-1"' in agent.logs()), what="the item's log"
    )


async def test_call_timeout_marks_the_agent_lost(
    spawn: Spawn, client: AgentClient, tmp_path: Path
) -> None:
    """A call past its timeout is CallTimeout and lost: the agent may still be working on it."""
    agent = await spawn(GATED)
    await wait_until(lambda: client.ready(agent.endpoint), what="the agent to become ready")
    gate = tmp_path / "never-before-timeout"
    slow = envelope("slow", {"gate": str(gate)})
    result = await client.invoke(agent.endpoint, agent.token, slow, timeout=0.3)
    assert (result.ok, result.reason, result.lost, result.status_code) == (
        False,
        "CallTimeout",
        True,
        None,
    )
    assert agent.endpoint in result.message
    assert "0.3s" in result.message
    status = await client.status(agent.endpoint, agent.token)
    assert status is not None
    assert (status.busy, status.current) == (True, "slow")
    gate.touch()


async def test_connection_refused_is_agent_lost(client: AgentClient) -> None:
    """Calling where nothing listens is AgentLost and lost, with a message saying so."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    result = await client.invoke(endpoint, "token", envelope("a", 1), timeout=5)
    assert (result.ok, result.reason, result.lost, result.status_code) == (
        False,
        "AgentLost",
        True,
        None,
    )
    assert "refused" in result.message
    assert endpoint in result.message
    assert await client.status(endpoint, "token") is None
    assert not await client.reset(endpoint, "token")
    assert not await client.ready(endpoint)


async def test_agent_crashing_mid_item_is_agent_lost(spawn: Spawn, client: AgentClient) -> None:
    """An agent process that dies while it holds an item leaves its caller AgentLost."""
    agent = await spawn(f"{EXAMPLES / 'flaky.py'}:agent")
    await wait_until(lambda: client.ready(agent.endpoint), what="flaky to become ready")
    result = await client.invoke(
        agent.endpoint, agent.token, envelope("c", {"crash": True}), timeout=10
    )
    assert (result.ok, result.reason, result.lost) == (False, "AgentLost", True)
    assert await agent.exit_code() == 3
