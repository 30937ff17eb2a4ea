"""PoolRuns over pools of HTTP servers taken as they are, on the local cluster.

A run with ``spec.request`` sends each item as the JSON body of a request of its own: through the
FastAPI chat server of ``examples/http`` every chat completion becomes its item's output; through
a server on Python's standard library, the items it answers 500 fail with HTTPStatus (status and
body in their message) and the rest keep their outputs, JSON or text as the server says. A run
whose pool serves the other protocol ends saying which field to change.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_support import Api, pool_spec
from pool_support import pool_status
from run_support import condition, finished_run, ready_pool, start_run

from agentpool.client.sync import Client
from cluster import wait_for

pytestmark = [pytest.mark.cluster]

REPO = Path(__file__).resolve().parents[2]

# A server that knows nothing of agentpool: GET answers ok; PUT reads the item and answers
# 500 with a JSON error for an item with "fail", its text as text/plain for one with "text", and
# the item back as JSON otherwise.
SERVER = textwrap.dedent(
    """
    import json, os
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def answer(self, status, content_type, body):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            self.answer(200, "text/plain", b"ok")

        def do_PUT(self):
            item = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if item.get("fail"):
                error = {"error": f"refused item {item['n']}", "seen": self.headers["X-Run"]}
                self.answer(500, "application/json", json.dumps(error).encode())
            elif item.get("text"):
                self.answer(200, "text/plain; charset=utf-8", f"item {item['n']}".encode())
            else:
                self.answer(200, "application/json", json.dumps({"got": item}).encode())

        def log_message(self, *args):
            pass

    address = (os.environ["AGENT_HOST"], int(os.environ["AGENT_PORT"]))
    ThreadingHTTPServer(address, Handler).serve_forever()
    """
)


def stdlib_pool(api: Api, namespace: str, name: str, agents: int) -> None:
    container = {
        "name": "agent",
        "command": ["python", "-c", SERVER],
        "env": [{"name": "AGENT_HOST", "value": "0.0.0.0"}],
    }
    spec = {
        "image": "agentpool:0.1.0",
        "protocol": "HTTP",
        "minSize": agents,
        "template": {"spec": {"containers": [container]}},
    }
    api.create("agentpools", namespace, name, spec)
    ready_pool(api, namespace, name, agents, timeout=90)


def test_a_run_of_200_chat_requests_records_every_completion(
    api: Api, namespace: str, operator_cluster: Any
) -> None:
    """200 chat completion bodies at cap 8 through the example chat server: the run drains,
    and each item's output, read back as `agentpool results` reads it, is the completion the
    server answered for that item."""
    manifest = yaml.safe_load((REPO / "examples" / "http" / "pool.yaml").read_text())
    api.create("agentpools", namespace, "chat", manifest["spec"])
    wait_for(
        lambda: pool_status(api, namespace, "chat").get("available", 0) >= 2,
        120,
        message="two chat servers available",
    )
    items = [
        {"model": "echo", "messages": [{"role": "user", "content": f"item {n}"}]}
        for n in range(200)
    ]
    start_run(
        api,
        namespace,
        "chats",
        items,
        poolRef={"name": "chat"},
        request={"path": "/v1/chat/completions"},
        cap=8,
    )
    status = finished_run(api, namespace, "chats", timeout=120)
    assert (status["phase"], status["result"]) == ("Succeeded", "Drained")
    assert (status["succeeded"], status["failed"], status["total"]) == (200, 0, 200)
    handle = operator_cluster.handle
    with Client.from_kubeconfig(handle.kubeconfig, handle.context, namespace=namespace) as client:
        outputs = {result.id: result.output for result in client.run("chats").results()}
    assert len(outputs) == 200
    completion = outputs["42"]
    assert completion["object"] == "chat.completion"
    assert completion["choices"][0]["message"] == {
        "role": "assistant",
        "content": "You said: item 42",
    }
    said = {key: output["choices"][0]["message"]["content"] for key, output in outputs.items()}
    assert said == {str(n): f"You said: item {n}" for n in range(200)}


def test_items_answered_500_fail_with_the_status_and_body_and_the_rest_keep_their_outputs(
    api: Api, namespace: str
) -> None:
    """Each item the server answers 500 fails alone, after its attempts, with reason HTTPStatus
    and the status and the body in its message; the others' outputs are the server's JSON, or its
    text where it answered text. The run's headers reach the server."""
    stdlib_pool(api, namespace, "plain", agents=2)
    items = [{"n": n, "fail": n % 4 == 0, "text": n % 4 == 1} for n in range(12)]
    start_run(
        api,
        namespace,
        "mixed",
        items,
        poolRef={"name": "plain"},
        request={"method": "PUT", "path": "/answer", "headers": {"X-Run": "mixed"}},
        cap=4,
        maxAttempts=2,
        backoffSeconds=0,
        failures="Report",
    )
    status = finished_run(api, namespace, "mixed")
    assert (status["phase"], status["result"]) == ("Succeeded", "Drained")
    assert (status["succeeded"], status["failed"]) == (9, 3)
    failed = {str(n) for n in range(0, 12, 4)}
    assert set(status["failures"]) == failed
    failure = status["failures"]["8"]
    assert failure["reason"] == "HTTPStatus"
    assert failure["attempts"] == 2
    assert failure["message"].startswith("PUT /answer answered HTTP 500: ")
    assert '"error": "refused item 8"' in failure["message"]
    assert '"seen": "mixed"' in failure["message"]
    assert failure["agent"].startswith("plain-")
    assert status["items"]["1"] == "item 1"
    assert status["items"]["2"] == {"got": items[2]}
    assert set(status["items"]) == {str(n) for n in range(12)} - failed
    # The agents answered: none was lost, and both still serve.
    assert pool_status(api, namespace, "plain").get("available") == 2


def test_a_pool_of_the_other_protocol_ends_the_run_naming_the_field_to_change(
    api: Api, namespace: str
) -> None:
    """A run without spec.request on an HTTP pool, and one with it on a pool of the agent
    protocol: neither sends an item, and each ends Deadlocked with a message that names the
    pool, its protocol, spec.request and what to change."""
    stdlib_pool(api, namespace, "plain", agents=1)
    api.create("agentpools", namespace, "native", pool_spec("echo", minSize=1))
    ready_pool(api, namespace, "native", 1)
    start_run(api, namespace, "no-request", [{"n": 1}, {"n": 2}], poolRef={"name": "plain"})
    start_run(
        api,
        namespace,
        "stray-request",
        [{"n": 1}],
        poolRef={"name": "native"},
        request={"path": "/answer"},
    )
    cases = {
        "no-request": (
            '2 of 2 items could not start: AgentPool "plain" serves plain HTTP '
            "(spec.protocol: HTTP)",
            "set spec.request",
        ),
        "stray-request": (
            '1 of 1 items could not start: AgentPool "native" serves the agent protocol '
            "(spec.protocol: Agentpool)",
            "remove spec.request",
        ),
    }
    for name, (start, fix) in cases.items():
        status = finished_run(api, namespace, name)
        assert (status["phase"], status["result"]) == ("Failed", "Deadlocked")
        assert status.get("succeeded", 0) == 0
        failed = condition(status, "Failed")
        assert failed["reason"] == "Deadlocked"
        assert failed["message"].startswith(start), failed["message"]
        assert fix in failed["message"]
