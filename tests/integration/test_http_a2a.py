"""An A2A agent taken as it is: the ``a2a-sdk`` client against a pool of the SDK's own server
(``examples/http/a2a_server.py``), through the gateway.

The client reads the agent card through the gateway's proxy path and is pointed there (the card
names the agent's own address); a streamed message's events (the task, its ``working`` status,
each word of its artifact, its ``completed`` status) reach it in order, each as the agent makes
it, and a message sent whole gets the finished task. The guide's block runs as printed.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers import get_artifact_text, new_text_message
from a2a.types.a2a_pb2 import AgentCard, Role, SendMessageRequest, StreamResponse, TaskState
from gateway_support import Gateway, caller_token, run_guide_block
from operator_support import Api
from pool_support import pool_status

from cluster import wait_for

pytestmark = [pytest.mark.cluster]

REPO = Path(__file__).resolve().parents[2]
A2A_BLOCK = (
    "tests/integration/test_http_a2a.py::test_the_a2a_client_streams_a_task_through_the_gateway"
)


def echo_pool(api: Api, namespace: str) -> None:
    manifest = yaml.safe_load((REPO / "examples" / "http" / "a2a-pool.yaml").read_text())
    spec: dict[str, Any] = manifest["spec"]
    spec["minSize"] = 1
    api.create("agentpools", namespace, "echo", spec)
    wait_for(
        lambda: pool_status(api, namespace, "echo").get("available") == 1,
        120,
        message="the A2A agent available",
    )


class Exchanges:
    """What went over the wire: each request's JSON-RPC method, and its answer's content type
    and the agent that served it."""

    def __init__(self) -> None:
        self.methods: list[str] = []
        self.answers: list[tuple[str, str]] = []

    async def request(self, request: httpx.Request) -> None:
        if request.method == "POST":
            self.methods.append(json.loads(request.content)["method"])

    async def response(self, response: httpx.Response) -> None:
        if response.request.method == "POST":
            kind = response.headers.get("content-type", "").split(";")[0]
            self.answers.append((kind, response.headers.get("agentpool-agent", "")))


def kind(event: StreamResponse) -> str:
    return str(event.WhichOneof("payload"))


def is_word(event: StreamResponse) -> bool:
    return kind(event) == "artifact_update"


async def a2a_calls(
    gateway: Gateway, token: str, gate: Path
) -> tuple[AgentCard, list[StreamResponse], list[StreamResponse], Exchanges]:
    """The card; a streamed message's events, the gate made once the first word has come; a
    message sent whole's answer."""
    url = f"{gateway.url}/v1/namespaces/{gateway.namespace}/agentpools/echo/proxy/"
    seen = Exchanges()
    async with httpx.AsyncClient(
        verify=gateway.context(),
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
        event_hooks={"request": [seen.request], "response": [seen.response]},
    ) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        for interface in card.supported_interfaces:
            interface.url = url

        streaming = ClientFactory(ClientConfig(httpx_client=http)).create(card)
        message = new_text_message("warm agents stream", role=Role.ROLE_USER)
        message.metadata.update({"hold": str(gate)})
        streamed: list[StreamResponse] = []
        async for event in streaming.send_message(SendMessageRequest(message=message)):
            if is_word(event) and not any(map(is_word, streamed)):
                # The agent makes its second word only once the gate exists, which is only now:
                # everything so far came through before the rest of the answer was made.
                await asyncio.to_thread(gate.touch)
            streamed.append(event)

        whole = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
        message = new_text_message("whole answer", role=Role.ROLE_USER)
        request = SendMessageRequest(message=message)
        answered = [event async for event in whole.send_message(request)]
    return card, streamed, answered, seen


def test_the_a2a_client_streams_a_task_through_the_gateway(
    api: Api, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    echo_pool(api, namespace)
    gateway = Gateway.of(api, namespace)
    token = caller_token(api, namespace, "a2a-caller", bound=True)
    gate = tmp_path / "gate"
    card, streamed, answered, seen = asyncio.run(a2a_calls(gateway, token, gate))

    assert card.name == "echo"
    assert card.capabilities.streaming
    assert seen.methods == ["SendStreamingMessage", "SendMessage"]
    assert [answer for answer, _ in seen.answers] == ["text/event-stream", "application/json"]
    assert all(agent.startswith("echo-") for _, agent in seen.answers), seen.answers

    assert gate.exists()
    assert [kind(event) for event in streamed] == [
        "task",
        "status_update",
        "artifact_update",
        "artifact_update",
        "artifact_update",
        "status_update",
    ]
    task_id = streamed[0].task.id
    updates = streamed[1:]
    assert all(
        (event.status_update.task_id or event.artifact_update.task_id) == task_id
        for event in updates
    )
    words = [event.artifact_update for event in updates if kind(event) == "artifact_update"]
    assert [get_artifact_text(update.artifact) for update in words] == [
        "warm",
        "agents",
        "stream",
    ]
    assert [(update.append, update.last_chunk) for update in words] == [
        (False, False),
        (True, False),
        (True, True),
    ]
    assert updates[0].status_update.status.state == TaskState.TASK_STATE_WORKING
    # Had the gateway held the events back, the gate would have come only after the agent's hold
    # ran out, and the task would have ended failed.
    assert updates[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED

    assert [kind(event) for event in answered] == ["task"]
    task = answered[0].task
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert [get_artifact_text(artifact, " ") for artifact in task.artifacts] == ["whole answer"]

    capsys.readouterr()
    run_guide_block(A2A_BLOCK, gateway, namespace, token, tmp_path)
    assert capsys.readouterr().out == "hello\npool\n"
