"""An agent written from docs/reference/protocol.md alone works as a pool's agent.

``examples/agents/plain_http.py`` uses only Python's standard library: no SDK, no project code.
Run by the real operator on the cluster, it takes a PoolRun to Drained with the right outputs (and
a failing item's HandlerError), takes a Cast run's items and is seen done through ``/status``,
answers a call and a cast through the gateway, and serves an AgentLease: ``/bind`` hands it the
lease's name, token, expiry and context, and ``/unbind`` takes them back when the lease goes.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from datetime import datetime
from typing import Any

import pytest
from gateway_support import Gateway, caller_token
from operator_support import Api
from pool_support import bound_agent, lease, pool_status
from run_support import finished_run, start_run

from cluster import wait_for

pytestmark = [pytest.mark.cluster]

PLAIN_AGENT = ["python", "examples/agents/plain_http.py"]
CONTEXT = {"session": "s-1", "tools": ["search"]}


def plain_pool(**spec: Any) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "agent", "command": PLAIN_AGENT}]}}
    return {"image": "agentpool:0.1.0", "template": template, **spec}


def ready_plain_pool(api: Api, namespace: str, agents: int) -> None:
    api.create("agentpools", namespace, "plain", plain_pool(minSize=agents))
    wait_for(
        lambda: pool_status(api, namespace, "plain").get("available") == agents,
        90,
        message=f"{agents} plain agents available",
    )


def echoed(item_id: Any, item: Any, *, input: Any, run: str | None) -> dict[str, Any]:
    """The plain agent's output for an item it was handed outside any lease."""
    return {"id": item_id, "item": item, "input": input, "attempt": 1, "run": run}


def agent_request(endpoint: str, path: str, token: str, body: Any = None) -> tuple[int, Any]:
    """One request straight to an agent, as a lease's client sends it."""
    request = urllib.request.Request(
        f"{endpoint}{path}",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return int(error.code), json.loads(error.read())


def secret_token(api: Api, namespace: str, name: str) -> str:
    secret = api.core.read_namespaced_secret(name, namespace)
    return base64.b64decode(secret.data["token"]).decode()


def moment(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_a_plain_agent_drains_call_and_cast_runs(api: Api, namespace: str) -> None:
    """A Call run of the plain agent ends Succeeded and Drained with each item's output (the
    envelope it was handed: id, item, the run's input, attempt, run name) and the failing
    item's HandlerError; a Cast run's items are all delivered, and the pool is idle again, so
    the operator saw them done through the agent's /status."""
    ready_plain_pool(api, namespace, agents=2)
    items = [{"id": f"i{n}", "n": n} for n in range(6)]
    failing = {"id": "bad", "fail": "no such tool"}
    run_input = {"model": "m-1"}
    common = {"poolRef": {"name": "plain"}, "itemId": "id", "cap": 2}
    start_run(
        api, namespace, "calls", [*items, failing], input=run_input, failures="Report", **common
    )
    status = finished_run(api, namespace, "calls")
    assert (status["phase"], status["result"]) == ("Succeeded", "Drained"), status.get("message")
    assert (status["succeeded"], status["failed"], status["total"]) == (6, 1, 7)
    assert status["items"] == {
        item["id"]: echoed(item["id"], item, input=run_input, run="calls") for item in items
    }
    assert status["failures"]["bad"]["reason"] == "HandlerError"
    assert "ValueError: no such tool" in status["failures"]["bad"]["message"]

    start_run(api, namespace, "casts", items, mode="Cast", **common)
    status = finished_run(api, namespace, "casts")
    assert (status["phase"], status["result"]) == ("Succeeded", "Drained"), status.get("message")
    assert (status["succeeded"], status["total"]) == (6, 6)
    wait_for(
        lambda: (
            (s := pool_status(api, namespace, "plain")).get("busy") == 0 and s.get("available") == 2
        ),
        60,
        message="both agents idle again after the casts",
    )


def test_a_plain_agent_answers_through_the_gateway(api: Api, namespace: str) -> None:
    """A call through the gateway answers the plain agent's output for the envelope the
    gateway built (the caller's id, attempt 1, no run); a cast is taken with 202."""
    ready_plain_pool(api, namespace, agents=1)
    gateway = Gateway.of(api, namespace)
    token = caller_token(api, namespace, "caller", bound=True)
    called = gateway.call("plain", {"q": "hi"}, token=token, id="g-1", input={"k": 2})
    assert called.status == 200, called
    assert called.body["output"] == echoed("g-1", {"q": "hi"}, input={"k": 2}, run=None)
    [pod] = api.live_pods(namespace, "plain")
    assert called.body["agent"] == pod["metadata"]["name"]
    cast = gateway.cast("plain", {"q": "later"}, token=token)
    assert cast.status == 202, cast
    wait_for(
        lambda: (
            (s := pool_status(api, namespace, "plain")).get("busy") == 0 and s.get("available") == 1
        ),
        60,
        message="the agent idle again after the cast",
    )


def test_a_plain_agent_is_bound_to_a_lease_and_unbound_when_it_ends(
    api: Api, namespace: str
) -> None:
    """The lease is Bound to the plain agent: its own token (never the pool's) opens the agent,
    whose output shows the lease's name, context and expiry as /bind handed them over. Deleting
    the lease calls /unbind: the agent logs it, forgets the lease (its status names none, the
    lease's token gets 401) and is back in the pool."""
    ready_plain_pool(api, namespace, agents=1)
    lease(api, namespace, "chat", "plain", ttlSeconds=300, context=CONTEXT)
    agent = bound_agent(api, namespace, "chat")
    status = api.status("agentleases", namespace, "chat")
    token = secret_token(api, namespace, status["tokenSecretRef"]["name"])
    pool_token = secret_token(api, namespace, "plain-agent-token")
    assert token != pool_token
    endpoint = status["endpoint"]

    envelope = {"id": "q1", "item": "hello", "input": None, "attempt": 1, "run": None}
    code, answer = agent_request(endpoint, "/invoke", token, envelope)
    assert code == 200, answer
    bound = answer["output"]["lease"]
    assert (bound["lease"], bound["context"]) == ("chat", CONTEXT)
    assert abs(moment(bound["expireTime"]) - moment(status["expireTime"])) < 1
    assert agent_request(endpoint, "/status", token)[1]["lease"] == "chat"

    api.delete("agentleases", namespace, "chat")
    wait_for(
        lambda: 'unbound from lease "chat"' in api.core.read_namespaced_pod_log(agent, namespace),
        60,
        message="the agent unbound from the lease",
    )
    assert agent_request(endpoint, "/status", token)[0] == 401
    code, answer = agent_request(endpoint, "/status", pool_token)
    assert (code, answer["lease"]) == (200, None)
    wait_for(lambda: pool_status(api, namespace, "plain").get("available") == 1, 60)
    log = api.core.read_namespaced_pod_log(agent, namespace)
    assert token not in log
    assert pool_token not in log
