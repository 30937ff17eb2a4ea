"""The agent protocol reference (docs/reference/protocol.md) names everything an agent meets.

Every request the operator's agent client sends (each method and path, header and body field,
found by recording what the client really sends), every reason of the protocol and every variable
an agent pod is started with (from the pod manifest and the local kubelet, not from a list kept
here) is in the reference, so a new endpoint, reason or variable cannot ship undocumented.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from agent_processes import REPO
from aiohttp import web

from agentpool.api.leases import MAX_CONTEXT_BYTES
from agentpool.api.pools import AgentPoolSpec
from agentpool.io.agents import AgentClient, parse_status
from agentpool.local.kubelet import podenv
from agentpool.pool.manifests import agent_pod
from agentpool.runs.calls import OUTPUT_MAX
from agentpool.settings import LeaseSettings, RecoverySettings, RunSettings
from agentpool.wire import protocol

REFERENCE = REPO / "docs" / "reference" / "protocol.md"
TOKEN = "reference-test-token-0c1d"
POOL = {
    "apiVersion": "agentpool.dev/v1alpha1",
    "kind": "AgentPool",
    "metadata": {"name": "pool", "namespace": "ns", "uid": "u-1"},
}


def reference() -> str:
    return REFERENCE.read_text()


@dataclass(frozen=True)
class Sent:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@pytest.fixture
async def recorder() -> AsyncIterator[tuple[str, list[Sent]]]:
    """A server that records each request and answers as an agent that always agrees would."""
    sent: list[Sent] = []

    async def record(request: web.Request) -> web.Response:
        raw = await request.read()
        body = json.loads(raw) if raw else None
        sent.append(Sent(request.method, request.path, dict(request.headers), body))
        if request.path == protocol.STATUS_PATH:
            return web.json_response({"busy": False, "current": None, "uses": 0})
        if request.path == protocol.INVOKE_PATH:
            cast = request.headers.get(protocol.PREFER_HEADER) == protocol.RESPOND_ASYNC
            return web.json_response({"output": 1}, status=202 if cast else 200)
        return web.json_response({})

    app = web.Application()
    app.router.add_route("*", "/{path:.*}", record)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}", sent
    await runner.cleanup()


async def every_request(client: AgentClient, endpoint: str) -> None:
    """Each call the operator's agent client makes, once."""
    envelope = {"id": "a", "item": 1, "input": None, "attempt": 1, "run": "r"}
    await client.invoke(endpoint, TOKEN, envelope, timeout=5)
    await client.invoke(endpoint, TOKEN, envelope, timeout=5, cast=True)
    await client.status(endpoint, TOKEN)
    await client.reset(endpoint, TOKEN)
    await client.ready(endpoint)
    expiry = "2030-01-02T03:04:05Z"
    await client.bind(
        endpoint, TOKEN, lease="l", lease_token="t", expire_time=expiry, context={"k": 1}
    )
    await client.unbind(endpoint, TOKEN, lease="l")


async def test_the_reference_names_every_request_header_and_field_the_operator_sends(
    recorder: tuple[str, list[Sent]], client: AgentClient
) -> None:
    """Every method and path the operator's client calls is a section of the reference, and
    every header and body field it sends is named there."""
    endpoint, sent = recorder
    await every_request(client, endpoint)
    text = reference()
    paths = {value for name, value in vars(protocol).items() if name.endswith("_PATH")}
    assert {s.path for s in sent} == paths, "a path of the protocol is never called"
    missing = [f"{s.method} {s.path}" for s in sent if f"## {s.method} {s.path}" not in text]
    assert missing == [], f"no section of the reference for {missing}"
    fields = {key for s in sent if isinstance(s.body, dict) for key in s.body}
    assert {"id", "item", "input", "attempt", "run", "lease", "token", "expireTime"} <= fields
    assert [field for field in sorted(fields) if f"| `{field}` |" not in text] == []
    headers = {name for s in sent for name in s.headers if name.lower() != "content-length"}
    protocol_headers = {"Authorization", "Content-Type", protocol.PREFER_HEADER}
    assert protocol_headers <= headers
    assert [h for h in sorted(protocol_headers) if f"`{h}`" not in text] == []
    assert f"`{protocol.RESPOND_ASYNC}`" in text
    bearer = [s for s in sent if s.path != protocol.HEALTHZ_PATH]
    assert all(s.headers["Authorization"] == f"Bearer {TOKEN}" for s in bearer)


def test_the_reference_names_every_reason_of_the_protocol() -> None:
    """Each reason an agent answers or the client reports is explained in the reference."""
    reasons = [
        value
        for name, value in vars(protocol).items()
        if isinstance(value, str)
        and name.isupper()
        and re.fullmatch(r"[A-Z][a-z]+(?:[A-Z][a-z]+)+|[A-Z][a-z]+", value)
        and not name.endswith(("_HEADER", "_ENV"))
    ]
    assert "BindFailed" in reasons
    assert "CallTimeout" in reasons
    text = reference()
    assert [reason for reason in reasons if f"`{reason}`" not in text] == []


async def test_the_reference_lists_every_variable_an_agent_is_started_with() -> None:
    """Every variable the operator puts on an agent pod, the ones the local kubelet adds and
    the ones the SDK reads are rows of the reference's table of variables."""
    pod = agent_pod(POOL, spec=AgentPoolSpec.model_validate({"image": "agent:1"}))
    container = pod["spec"]["containers"][0]
    from_operator = {entry["name"] for entry in container["env"]}

    async def fetch(kind: str, namespace: str, name: str) -> dict[str, Any]:
        return {"data": {"token": "dG9rZW4="}}

    local = await podenv.container_env(container, pod, base={}, pod_ip="127.0.0.9", fetch=fetch)
    from_kubelet = set(local) - from_operator - {"HOSTNAME"}
    read_by_sdk = {value for name, value in vars(protocol).items() if name.endswith("_ENV")}
    names = from_operator | from_kubelet | read_by_sdk
    assert {"AGENT_PORT", "AGENTPOOL_TOKEN", "AGENTPOOL_SLOTS", "AGENT_HOST"} <= names
    text = reference()
    assert [name for name in sorted(names) if f"`{name}`" not in text] == []


def test_the_figures_in_the_reference_are_the_operators_own() -> None:
    """The limits and timeouts the reference gives an author are the defaults the operator
    runs with, so changing one there fails here until the reference says the new figure."""
    client = inspect.signature(AgentClient.bind).parameters["timeout"].default
    figures = {
        f"{OUTPUT_MAX:,} bytes": "the largest output",
        f"{MAX_CONTEXT_BYTES // 1024} KiB": "the largest lease context",
        f"(default `{AgentPoolSpec().port}`)": "the default port",
        f"(default {AgentPoolSpec().call_timeout_seconds} s)": "the default call timeout",
        f"every {RunSettings().cast_poll_seconds:g} s": "how often a cast's agent is asked",
        f"{LeaseSettings().bind_timeout_seconds:g} s each": "the /bind and /unbind timeout",
        f"within {client:g} s": "the /bind timeout",
        f"after {RecoverySettings().silence_seconds:g} s of silence": "when a silent agent is lost",
        f"({RecoverySettings().status_timeout_seconds:g} s after an operator restart)": "status",
        f"default `{protocol.DEFAULT_DRAIN_SECONDS:g}`": "the SDK's drain time",
    }
    for name, default in (("status", 5.0), ("reset", 30.0), ("unbind", 30.0)):
        assert inspect.signature(getattr(AgentClient, name)).parameters["timeout"].default == (
            default
        ), f"the reference's {name} timeout is {default:g} s"
    text = reference()
    assert [f"{what}: {figure}" for figure, what in figures.items() if figure not in text] == []


class _Reads(dict[str, Any]):
    """A status body that notes each key the operator reads of it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)


def test_the_reference_explains_every_status_field_the_operator_reads() -> None:
    """Each field of ``GET /status`` the operator reads is a row of the reference's table."""
    body = _Reads(busy=True, current="a", items=["a"], uses=1, lease="chat")
    assert parse_status(body) is not None
    assert {"busy", "current", "slots", "busySlots", "items", "uses", "lease"} <= body.read
    text = reference()
    assert [field for field in sorted(body.read) if f"| `{field}` |" not in text] == []
