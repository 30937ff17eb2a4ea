"""Pools of HTTP servers taken as they are, reached through the gateway's proxy path.

The agents here know nothing of agentpool: a server on Python's standard library (streaming
server-sent events, held by a file the test makes) and the FastAPI chat server of
``examples/http``, called with the ``openai`` client. Through the gateway each event reaches the
caller as the server sends it, a caller that hangs up frees its agent at once, an agent that dies
mid-answer breaks the caller's stream and the next request goes to another agent, the caller's
token never reaches an agent, and RBAC is asked with the method's verb on ``agentpools/proxy``.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import shutil
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml
from gateway_support import Gateway, caller_token, chart_caller_role, run_guide_block
from operator_support import Api
from pool_support import bound_agent, lease, pool_status

from cluster import Kubectl, wait_for
from docblocks import block_for, namespaced_kubeconfig, run_shell_block

pytestmark = [pytest.mark.cluster]

REPO = Path(__file__).resolve().parents[2]
# The name whole on one line: tests/ship/test_docs.py looks for it as the docs' marker says it.
OPENAI_BLOCK = "tests/integration/test_http_pools.py::test_the_openai_client_streams_a_chat_through_the_gateway"  # noqa: E501

# A server that knows nothing of agentpool: GET /health; GET /events?gate=PATH streams one event,
# waits for PATH to exist, then a second; GET /die sends one event and exits mid-answer; POST
# /echo answers the headers it got; /hangup, on a connection that has served a request before,
# closes it unanswered, as a keep-alive ending just then does, and answers "fresh" on a new one.
# Each request's method and path are logged.
SERVER = textwrap.dedent(
    """
    import json, os, pathlib, sys, time, urllib.parse
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def chunk(self, data):
            self.wfile.write(b"%x\\r\\n%b\\r\\n" % (len(data), data))
            self.wfile.flush()

        def stream_head(self, session=None):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("X-Served-By", os.environ["AGENT_HOST"])
            if session:
                self.send_header("X-Session", session)
            self.end_headers()

        def hung_up(self):
            # /hangup: close a kept connection unanswered; True when it answered or closed.
            served = getattr(self, "served", 0)
            self.served = served + 1
            if urllib.parse.urlsplit(self.path).path != "/hangup":
                return False
            if served:
                self.close_connection = True
                return True
            self.send_response(200)
            self.send_header("Content-Length", "5")
            self.end_headers()
            self.wfile.write(b"fresh")
            return True

        def do_GET(self):
            print(self.command, self.path, flush=True)
            if self.hung_up():
                return
            url = urllib.parse.urlsplit(self.path)
            if url.path == "/health":
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")
            elif url.path == "/events":
                query = urllib.parse.parse_qs(url.query)
                gate = pathlib.Path(query["gate"][0])
                self.stream_head(query.get("session", [None])[0])
                self.chunk(b"data: one\\n\\n")
                deadline = time.monotonic() + 60
                while not gate.exists() and time.monotonic() < deadline:
                    time.sleep(0.02)
                self.chunk(b"data: two\\n\\n")
                self.wfile.write(b"0\\r\\n\\r\\n")
            elif url.path == "/die":
                self.stream_head()
                self.chunk(b"data: one\\n\\n")
                os._exit(3)
            else:
                self.send_error(404)

        def do_DELETE(self):
            print(self.command, self.path, flush=True)
            self.send_response(204)
            self.end_headers()

        def do_POST(self):
            print(self.command, self.path, flush=True)
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.hung_up():
                return
            answer = json.dumps({"headers": dict(self.headers), "body": body.decode()}).encode()
            self.send_response(201)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    address = (os.environ["AGENT_HOST"], int(os.environ["AGENT_PORT"]))
    ThreadingHTTPServer(address, Handler).serve_forever()
    """
)


def http_pool(api: Api, namespace: str, name: str, agents: int, **more: Any) -> None:
    template = {
        "spec": {
            "containers": [
                {
                    "name": "agent",
                    "command": ["python", "-c", SERVER],
                    "env": [{"name": "AGENT_HOST", "value": "0.0.0.0"}],
                }
            ]
        }
    }
    spec = {
        "image": "agentpool:0.1.0",
        "protocol": "HTTP",
        "minSize": agents,
        "readinessProbe": {"httpGet": {"path": "/health"}},
        "template": template,
        **more,
    }
    api.create("agentpools", namespace, name, spec)
    wait_for(
        lambda: pool_status(api, namespace, name).get("available") == agents,
        90,
        message=f"{agents} agents of {name} available",
    )


def proxy(gateway: Gateway, pool: str, path: str) -> str:
    return f"/v1/namespaces/{gateway.namespace}/agentpools/{pool}/proxy{path}"


def open_stream(
    gateway: Gateway, pool: str, path: str, token: str, **headers: str
) -> tuple[http.client.HTTPSConnection, http.client.HTTPResponse]:
    connection = http.client.HTTPSConnection(
        gateway.host, gateway.port, context=gateway.context(), timeout=60
    )
    connection.request(
        "GET", proxy(gateway, pool, path), headers={"Authorization": f"Bearer {token}", **headers}
    )
    return connection, connection.getresponse()


def next_event(response: http.client.HTTPResponse) -> bytes:
    """One server-sent event's lines, read as they come."""
    lines = []
    while (line := response.readline()) not in (b"\n", b""):
        lines.append(line)
    return b"".join(lines)


def test_each_event_reaches_the_caller_as_the_server_sends_it(
    api: Api, namespace: str, tmp_path: Path
) -> None:
    http_pool(api, namespace, "events", agents=1)
    gateway = Gateway.of(api, namespace)
    token = caller_token(api, namespace, "streamer", bound=True)
    gate = tmp_path / "gate"
    connection, response = open_stream(gateway, "events", f"/events?gate={gate}", token)
    try:
        assert response.status == 200
        assert response.getheader("Content-Type") == "text/event-stream"
        assert response.getheader("Agentpool-Agent", "").startswith("events-")
        # The server sends its second event only once the gate exists, which the test makes
        # only after it has read the first: the first came through before the answer ended.
        assert next_event(response) == b"data: one\n"
        gate.touch()
        assert next_event(response) == b"data: two\n"
        assert response.read() == b""
    finally:
        connection.close()

    echoed = gateway.send(
        "events", {"x": 1}, token=token, path=proxy(gateway, "events", "/echo?q=1")
    )
    assert echoed.status == 201
    assert echoed.headers["Agentpool-Agent"].startswith("events-")
    passed = {name.lower() for name in echoed.body["headers"]}
    assert "authorization" not in passed
    assert echoed.body["body"] == '{"x": 1}'


def test_a_caller_that_hangs_up_frees_its_agent_and_a_dead_agent_breaks_the_stream(
    api: Api, namespace: str, tmp_path: Path
) -> None:
    http_pool(api, namespace, "single", agents=1)
    gateway = Gateway.of(api, namespace)
    token = caller_token(api, namespace, "hangup", bound=True)
    connection, response = open_stream(
        gateway, "single", f"/events?gate={tmp_path / 'never'}", token
    )
    assert next_event(response) == b"data: one\n"
    busy = gateway.send(
        "single", None, token=token, method="GET", path=proxy(gateway, "single", "/health")
    )
    assert busy.status == 429 or busy.status == 503  # the one agent is held
    connection.close()

    def served_at_once() -> bool:
        reply = _get_no_wait(gateway, "single", "/health", token)
        return reply == 200

    wait_for(served_at_once, 30, message="the agent given back once its caller hung up")

    connection, response = open_stream(gateway, "single", "/die", token)
    try:
        assert next_event(response) == b"data: one\n"
        with pytest.raises((http.client.IncompleteRead, ConnectionError)):
            response.read()
    finally:
        connection.close()
    # The agent that broke off was retired, and a new one serves the next request.
    reply = gateway.send(
        "single", None, token=token, method="GET", path=proxy(gateway, "single", "/health")
    )
    assert reply.status == 200, reply.body


def _get(gateway: Gateway, pool: str, path: str, token: str, **headers: str) -> int:
    connection, response = open_stream(gateway, pool, path, token, **headers)
    try:
        response.read()
        return response.status
    finally:
        connection.close()


def _get_no_wait(gateway: Gateway, pool: str, path: str, token: str) -> int:
    return _get(gateway, pool, path, token, **{"Agentpool-Wait": "false"})


def test_a_lease_s_agent_is_reached_through_the_lease(api: Api, namespace: str) -> None:
    """A request to .../agentleases/LEASE/proxy/PATH goes to the agent the lease holds, and the
    pool's own requests go to its other agents; a lease that holds none is 404."""
    http_pool(api, namespace, "leased", agents=2)
    gateway = Gateway.of(api, namespace)
    token = caller_token(api, namespace, "holder", bound=True)
    lease(api, namespace, "session", "leased")
    agent = bound_agent(api, namespace, "session")
    through_lease = f"/v1/namespaces/{namespace}/agentleases/session/proxy/echo"
    for _ in range(3):
        reply = gateway.send("leased", {"n": 1}, token=token, path=through_lease)
        assert reply.status == 201, reply.body
        assert reply.headers["Agentpool-Agent"] == agent
        pooled = gateway.send("leased", {}, token=token, path=proxy(gateway, "leased", "/echo"))
        assert pooled.status == 201
        assert pooled.headers["Agentpool-Agent"] != agent
    missing = gateway.send(
        "leased", {}, token=token, path=f"/v1/namespaces/{namespace}/agentleases/none/proxy/x"
    )
    assert missing.status == 404
    assert "holds no agent" in missing.body["error"]["message"]


def test_a_session_is_held_from_the_head_of_the_answer_that_begins_it(
    api: Api, namespace: str, tmp_path: Path
) -> None:
    """The session's next request may come before the answer that began it has ended (an MCP
    client sends it once it has read the first event): it reaches the same agent, and a DELETE
    ends the session."""
    http_pool(api, namespace, "sessions", agents=2, sessions={"header": "X-Session"})
    gateway = Gateway.of(api, namespace)
    token = caller_token(api, namespace, "sessioner", bound=True)
    gate = tmp_path / "gate"
    connection, response = open_stream(
        gateway, "sessions", f"/events?gate={gate}&session=s-1", token
    )
    try:
        agent = response.getheader("Agentpool-Agent")
        assert response.getheader("X-Session") == "s-1"
        assert next_event(response) == b"data: one\n"
        for _ in range(3):
            again = gateway.send(
                "sessions",
                {"n": 1},
                token=token,
                path=proxy(gateway, "sessions", "/echo"),
                headers={"X-Session": "s-1"},
            )
            assert again.status == 201, again.body
            assert again.headers["Agentpool-Agent"] == agent
        gate.touch()
        assert next_event(response) == b"data: two\n"
    finally:
        connection.close()
    ended = gateway.send(
        "sessions",
        None,
        token=token,
        method="DELETE",
        path=proxy(gateway, "sessions", "/"),
        headers={"X-Session": "s-1"},
    )
    assert ended.status == 204
    gone = gateway.send(
        "sessions",
        {},
        token=token,
        path=proxy(gateway, "sessions", "/echo"),
        headers={"X-Session": "s-1"},
    )
    assert gone.status == 404
    assert gone.body["error"]["reason"] == "SessionNotFound"


def test_rbac_asks_the_method_s_verb_and_a_native_pool_is_not_forwarded(
    api: Api, namespace: str
) -> None:
    http_pool(api, namespace, "guarded", agents=1)
    gateway = Gateway.of(api, namespace)
    stranger = caller_token(api, namespace, "stranger", bound=False)
    refused = gateway.send(
        "guarded",
        None,
        token=stranger,
        method="DELETE",
        path=proxy(gateway, "guarded", "/thing"),
    )
    assert refused.status == 403
    assert 'cannot delete resource "agentpools/proxy"' in refused.body["error"]["message"]


def test_a_kept_connection_closed_unanswered_retires_no_agent_and_a_get_goes_again(
    api: Api, namespace: str
) -> None:
    """An agent whose kept connection closes as a request goes (its keep-alive ending just
    then) is not taken for lost: a POST, which may not go twice, is a 502 saying so and the
    agent keeps serving; a GET goes again on a new connection and is answered."""
    http_pool(api, namespace, "keepalive", agents=1)
    gateway = Gateway.of(api, namespace)
    token = caller_token(api, namespace, "caller", bound=True)

    def send(method: str, path: str) -> Any:
        return gateway.send(
            "keepalive", {}, token=token, method=method, path=proxy(gateway, "keepalive", path)
        )

    # The first request leaves the gateway's connection to the agent kept; the next meets it
    # closing.
    assert send("POST", "/echo").status == 201
    refused = send("POST", "/hangup")
    assert refused.status == 502, refused.body
    assert "did not send it twice" in refused.body["error"]["message"]
    assert send("POST", "/echo").status == 201
    again = send("GET", "/hangup")
    assert again.status == 200, again.body
    status = pool_status(api, namespace, "keepalive")
    assert status.get("available") == 1, status
    pods = [p.metadata.name for p in api.core.list_namespaced_pod(namespace).items]
    assert len(pods) == 1, pods  # the agent was not retired and replaced


def test_the_openai_client_streams_a_chat_through_the_gateway(
    api: Api, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The pool of examples/http serves the openai client, whole and streamed, and the guide's
    block runs as printed."""
    manifest = yaml.safe_load((REPO / "examples" / "http" / "pool.yaml").read_text())
    spec: dict[str, Any] = manifest["spec"]
    spec["minSize"] = 1
    api.create("agentpools", namespace, "chat", spec)
    wait_for(
        lambda: pool_status(api, namespace, "chat").get("available") == 1,
        120,
        message="the chat server available",
    )
    gateway = Gateway.of(api, namespace)
    token = caller_token(api, namespace, "chatter", bound=True)
    client = openai.OpenAI(
        base_url=f"{gateway.url}{proxy(gateway, 'chat', '/v1')}",
        api_key=token,
        http_client=httpx.Client(verify=gateway.context()),
        max_retries=0,
    )
    messages: Any = [{"role": "user", "content": "warm agents stream"}]
    whole = client.chat.completions.create(model="echo", messages=messages)
    assert whole.choices[0].message.content == "You said: warm agents stream"
    pieces = [
        chunk.choices[0].delta.content or ""
        for chunk in client.chat.completions.create(model="echo", messages=messages, stream=True)
        if chunk.choices
    ]
    assert "".join(pieces) == "You said: warm agents stream"
    assert len([p for p in pieces if p]) == 5  # one event per word, as the server sent them
    client.close()

    capsys.readouterr()
    run_guide_block(OPENAI_BLOCK, gateway, namespace, token, tmp_path)
    assert capsys.readouterr().out == "You said: hello pool\n"


CURL_BLOCK = "tests/integration/test_http_pools.py::test_the_guides_curl_streams_a_chat_as_printed"


def test_the_guides_curl_streams_a_chat_as_printed(
    api: Api, namespace: str, kubectl_op: Kubectl, operator_cluster: Any, tmp_path: Path
) -> None:
    """The guide's shell block, run by bash as printed in a namespace of the test's own: the
    chat pool of examples/http, a caller bound to the chart's agentpool-caller, and curl -N,
    which prints the server's events, one chunk per word, and its end."""
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed here")
    block = block_for(CURL_BLOCK, REPO / "docs" / "guides" / "bring-your-own-agent.md")
    script = block.text.replace("NS=default", f"NS={namespace}", 1)
    script = script.replace("examples/", f"{REPO}/examples/")
    kubeconfig = namespaced_kubeconfig(
        kubectl_op.kubeconfig, kubectl_op.context, namespace, tmp_path / "kubeconfig"
    )
    with contextlib.ExitStack() as stack:
        if not operator_cluster.handle.local:
            stack.enter_context(chart_caller_role(api))
        done = run_shell_block(
            replace(block, text=script),
            kubeconfig=kubeconfig,
            bindir=Path(kubectl_op.binary).parent,
            cwd=tmp_path,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr
    events = [line for line in done.stdout.splitlines() if line.startswith("data: ")]
    words = [
        chunk["choices"][0]["delta"].get("content", "")
        for line in events[:-1]
        if (chunk := json.loads(line.removeprefix("data: ")))["choices"]
    ]
    assert "".join(words) == "You said: hi pool"
    assert events[-1] == "data: [DONE]"
