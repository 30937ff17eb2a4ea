"""``examples/agents/plain_http.py``, written from docs/reference/protocol.md alone, serves the
operator's own agent client.

The agent uses only the standard library. Against the client the operator calls agents with, it
answers calls, casts, status and reset, takes a lease's bind, opens to the lease's token while
bound and closes at unbind or expiry, and refuses exactly the ``/invoke`` bodies the SDK refuses,
each with a 400 that says why.
"""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from agent_processes import LISTENING, REPO, agent_env, wait_for, wait_until
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentpool.io.agents import AgentClient
from agentpool.wire.envelopes import parse_envelope

PLAIN_AGENT = REPO / "examples" / "agents" / "plain_http.py"
TOKEN = "plain-agent-test-token-3e7a"


@dataclass
class PlainAgent:
    process: subprocess.Popen[bytes]
    endpoint: str
    log: Path

    def request(self, method: str, path: str, body: bytes | None, token: str) -> tuple[int, Any]:
        host, port = self.endpoint.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, json.loads(response.read())
        finally:
            connection.close()


@pytest.fixture
def plain_agent(tmp_path: Path) -> Iterator[PlainAgent]:
    """``examples/agents/plain_http.py`` on 127.0.0.1 with two slots, stopped after the test."""
    log = tmp_path / "agent.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, str(PLAIN_AGENT)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=agent_env(TOKEN, {"AGENTPOOL_SLOTS": "2"}),
        )
    try:
        deadline = time.monotonic() + 30
        while (match := LISTENING.search(log.read_text())) is None:
            assert process.poll() is None, f"the agent exited: {log.read_text()}"
            assert time.monotonic() < deadline, "the agent did not listen within 30s"
            time.sleep(0.01)
        yield PlainAgent(process, match.group(1), log)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)


def in_an_hour() -> str:
    return (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def test_the_plain_agent_serves_calls_casts_status_and_reset(
    plain_agent: PlainAgent, client: AgentClient, tmp_path: Path
) -> None:
    """Written from the reference alone, the agent answers the operator's own client: a call's
    output echoes its envelope, a failing item is a HandlerError, a cast is taken (202) and
    shown in /status until done, a reset counts as done (501: no state), a wrong token is
    refused, and SIGTERM drains it to exit 0."""
    endpoint = plain_agent.endpoint
    assert await client.ready(endpoint)
    envelope = {"id": 7, "item": {"n": 1}, "input": {"k": "v"}, "attempt": 2, "run": "r"}
    called = await client.invoke(endpoint, TOKEN, envelope, timeout=10)  # type: ignore[arg-type]
    assert called.ok, called
    assert called.output == envelope
    failed = await client.invoke(
        endpoint,
        TOKEN,
        {**envelope, "item": {"fail": "no n"}},
        timeout=10,  # type: ignore[arg-type]
    )
    assert (failed.ok, failed.reason, failed.status_code, failed.lost) == (
        False,
        "HandlerError",
        500,
        False,
    )
    assert "no n" in failed.message

    gate = tmp_path / "gate"
    cast = {"id": "c", "item": {"wait": str(gate)}, "input": None, "attempt": 1, "run": None}
    taken = await client.invoke(endpoint, TOKEN, cast, timeout=10, cast=True)  # type: ignore[arg-type]
    assert (taken.ok, taken.status_code) == (True, 202)
    status = await client.status(endpoint, TOKEN)
    assert status is not None
    assert (status.busy, status.items, status.slots, status.busy_slots) == (True, ("c",), 2, 1)
    gate.touch()

    async def idle() -> bool:
        found = await client.status(endpoint, TOKEN)
        return found is not None and not found.busy

    await wait_until(idle, what="the cast item done")
    status = await client.status(endpoint, TOKEN)
    assert status is not None
    assert status.uses == 3
    assert await client.reset(endpoint, TOKEN)
    refused = await client.invoke(endpoint, "wrong", envelope, timeout=10)  # type: ignore[arg-type]
    assert (refused.reason, refused.status_code) == ("Unauthorized", 401)
    assert await client.status(endpoint, "wrong") is None

    plain_agent.process.send_signal(signal.SIGTERM)
    await wait_for(lambda: plain_agent.process.poll() is not None, what="the agent to exit")
    assert plain_agent.process.returncode == 0


async def test_the_plain_agent_takes_a_lease_and_gives_it_back(
    plain_agent: PlainAgent, client: AgentClient
) -> None:
    """/bind hands the agent the lease's token, expiry and context: the lease's token then opens
    /invoke and /status (the output names the lease and its context) but not /reset; a second
    lease is refused as AlreadyBound; a renewal moves only the expiry; /unbind takes the token
    back (401 from then), twice is harmless, and a lease whose expiry has passed opens
    nothing."""
    endpoint, lease_token = plain_agent.endpoint, "lease-token-9a8b"
    expiry = in_an_hour()
    bound = await client.bind(
        endpoint, TOKEN, lease="chat", lease_token=lease_token, expire_time=expiry, context=[1]
    )
    assert bound.ok, bound
    envelope = {"id": "q", "item": "hi", "input": None, "attempt": 1, "run": None}
    called = await client.invoke(endpoint, lease_token, envelope, timeout=10)  # type: ignore[arg-type]
    lease = {"lease": "chat", "context": [1], "expireTime": expiry}
    assert called.output == {**envelope, "lease": lease}
    status = await client.status(endpoint, lease_token)
    assert status is not None
    assert status.lease == "chat"
    assert plain_agent.request("POST", "/reset", b"", lease_token)[0] == 401
    assert plain_agent.request("POST", "/unbind", b'{"lease":"chat"}', lease_token)[0] == 401
    other = await client.bind(
        endpoint, TOKEN, lease="other", lease_token="t2", expire_time=expiry, context=None
    )
    assert (other.ok, other.status_code, other.reason) == (False, 409, "AlreadyBound")
    later = in_an_hour()
    renewed = await client.bind(
        endpoint, TOKEN, lease="chat", lease_token="t4", expire_time=later, context=[2]
    )
    assert renewed.ok
    again = await client.invoke(endpoint, lease_token, envelope, timeout=10)  # type: ignore[arg-type]
    assert again.output["lease"] == {**lease, "expireTime": later}
    assert await client.status(endpoint, "t4") is None

    assert await client.unbind(endpoint, TOKEN, lease="chat")
    assert await client.unbind(endpoint, TOKEN, lease="chat")
    assert await client.status(endpoint, lease_token) is None
    after = await client.invoke(endpoint, TOKEN, envelope, timeout=10)  # type: ignore[arg-type]
    assert after.output == envelope
    assert 'unbound from lease "chat"' in plain_agent.log.read_text()

    past = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    expired = await client.bind(
        endpoint, TOKEN, lease="old", lease_token="t3", expire_time=past, context=None
    )
    assert expired.ok
    assert await client.status(endpoint, "t3") is None
    assert lease_token not in plain_agent.log.read_text()


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=8,
)
ENVELOPE_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "id": JSON,
        "item": JSON,
        "input": JSON,
        "attempt": JSON | st.integers(),
        "run": JSON,
        "mode": st.sampled_from(["Call", "Cast", "cast", ""]) | JSON,
    },
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=ENVELOPE_FIELDS | JSON | st.binary(max_size=40))
def test_the_plain_agent_takes_exactly_the_envelopes_the_sdk_takes(
    plain_agent: PlainAgent, body: Any
) -> None:
    """Any body, well-formed or not: the agent written from the reference accepts it exactly
    when the SDK's parser does, and a refusal is 400 BadRequest with a sentence saying why."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    if isinstance(body, dict) and isinstance(body.get("item"), dict):
        body["item"].pop("wait", None)  # an item that waits on a file would hold its slot
        raw = json.dumps(body).encode()
    sdk = parse_envelope(raw)
    status, answer = plain_agent.request("POST", "/invoke", raw, TOKEN)
    if isinstance(sdk, str):
        assert status == 400, (sdk, answer)
        assert answer["error"]["reason"] == "BadRequest"
        assert answer["error"]["message"]
    else:
        assert status in (200, 202, 500), answer  # 500: an item asking to fail does
