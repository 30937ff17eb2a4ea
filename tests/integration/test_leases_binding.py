"""AgentLease tokens a client can trust, on a cluster with the real operator and real SDK agents.

A lease's token opens its own agent only, only while the lease is Bound; the pool's token never
reaches a lease holder and neither token shows in status, Events or logs; the lease's context
reaches its agent at bind and is gone for the next holder; a holder that renews keeps its agent
and one that stops loses it at expiry; an agent without /bind fails the lease. Each test drives
the public surface only (the kubernetes client and the agents' own HTTP), so it runs on the local
cluster and, with ``--kubeconfig``, on a real API server.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from typing import Any

from operator_support import Api
from pool_support import bound_agent, lease, lease_phase, pool_status

from agentpool.pool.manifests import lease_token_secret
from cluster import wait_for

CONTEXT = {"session": "s-42", "user": {"id": 7, "roles": ["reader"]}}


def bound_pool(agent: str, **spec: Any) -> dict[str, Any]:
    """A pool of the agents in ``tests/integration/agents``: ``bound`` (the SDK) or ``nobind``."""
    command = (
        ["python", "-m", "agentpool.agent", f"tests/integration/agents/{agent}.py:agent"]
        if agent == "bound"
        else ["python", f"tests/integration/agents/{agent}.py"]
    )
    template = {"spec": {"containers": [{"name": "agent", "command": command}]}}
    return {"image": "agentpool:0.1.0", "template": template, **spec}


def call(
    endpoint: str, path: str, token: str, *, body: Any = None, method: str | None = None
) -> tuple[int, Any]:
    """One request to an agent, as a lease's client makes it: (HTTP status, JSON answer)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{endpoint}{path}",
        data=data,
        method=method or ("GET" if data is None else "POST"),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status), json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return int(error.code), json.loads(error.read() or b"null")


def secret_token(api: Api, namespace: str, name: str) -> str:
    secret = api.core.read_namespaced_secret(name, namespace)
    return base64.b64decode(secret.data["token"]).decode()


def lease_token(api: Api, namespace: str, name: str) -> tuple[str, dict[str, Any]]:
    """The token a lease's client reads through status.tokenSecretRef, and the status."""
    status = api.status("agentleases", namespace, name)
    ref = status["tokenSecretRef"]
    assert ref == {"name": f"{name}-lease-token", "key": "token"}
    return secret_token(api, namespace, ref["name"]), status


def secret_names(api: Api, namespace: str) -> set[str]:
    return {s.metadata.name for s in api.core.list_namespaced_secret(namespace).items}


def endpoints(api: Api, namespace: str, pool: str) -> dict[str, str]:
    """Each agent pod of ``pool`` by name, with the URL its protocol is served on."""
    return {
        pod["metadata"]["name"]: f"http://{pod['status']['podIP']}:8080"
        for pod in api.live_pods(namespace, pool)
        if (pod.get("status") or {}).get("podIP")
    }


def invoke(endpoint: str, token: str) -> tuple[int, Any]:
    envelope = {"id": "a", "item": 1, "input": None, "attempt": 1, "run": "client"}
    return call(endpoint, "/invoke", token, body=envelope)


def renew(api: Api, namespace: str, name: str) -> None:
    """What a holder does to keep its agent: spec.renewTime to now, as a MicroTime."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    api.patch_spec("agentleases", namespace, name, {"renewTime": now})


def expire_epoch(api: Api, namespace: str, name: str) -> float:
    stamp = api.status("agentleases", namespace, name)["expireTime"]
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_a_lease_token_opens_its_own_agent_only_and_only_while_bound(
    api: Api, namespace: str
) -> None:
    """The lease's own token (in <lease>-lease-token, never the pool's Secret) is accepted on
    /invoke and /status of its agent, refused (401) on the pool's other agent and on the
    operator's own calls, and refused on its agent too once the lease is deleted, when its
    Secret goes with it. No agent pod mounts a service account token."""
    api.create("agentpools", namespace, "p", bound_pool("bound", minSize=2))
    wait_for(lambda: pool_status(api, namespace, "p").get("available") == 2, 60)
    lease(api, namespace, "chat", "p", ttlSeconds=120)
    held = bound_agent(api, namespace, "chat")
    token, status = lease_token(api, namespace, "chat")
    assert token != secret_token(api, namespace, "p-agent-token")
    urls = endpoints(api, namespace, "p")
    own, [other] = urls[held], [url for name, url in urls.items() if name != held]
    assert status["endpoint"] == own

    assert call(own, "/status", token)[0] == 200
    assert invoke(own, token) == (200, {"output": {"lease": "chat", "context": None}})
    assert call(other, "/status", token)[0] == 401
    assert invoke(other, token)[0] == 401
    assert call(own, "/reset", token, body={})[0] == 401
    assert call(own, "/unbind", token, body={"lease": "chat"})[0] == 401

    api.delete("agentleases", namespace, "chat")
    wait_for(lambda: call(own, "/status", token)[0] == 401, 30, message="the token refused")
    assert invoke(own, token)[0] == 401
    wait_for(
        lambda: "chat-lease-token" not in secret_names(api, namespace),
        60,
        message="the lease's Secret collected with it",
    )
    for pod in api.live_pods(namespace, "p"):
        assert pod["spec"].get("automountServiceAccountToken") is False


def test_a_lease_token_stops_working_at_expiry(api: Api, namespace: str) -> None:
    """A lease nobody renews expires: from then its token gets 401 on its agent, its Secret is
    gone, and the agent is back in the pool."""
    api.create("agentpools", namespace, "p", bound_pool("bound", minSize=1))
    wait_for(lambda: pool_status(api, namespace, "p").get("available") == 1, 60)
    lease(api, namespace, "brief", "p", ttlSeconds=10)
    bound_agent(api, namespace, "brief")
    token, status = lease_token(api, namespace, "brief")
    assert call(status["endpoint"], "/status", token)[0] == 200
    wait_for(lambda: lease_phase(api, namespace, "brief") == "Expired", 60, message="expired")
    assert call(status["endpoint"], "/status", token)[0] == 401
    assert "brief-lease-token" not in secret_names(api, namespace)
    wait_for(lambda: pool_status(api, namespace, "p").get("available") == 1, 30)


def test_a_holder_that_renews_keeps_its_agent_and_no_token_is_ever_shown(
    api: Api, namespace: str, operator_cluster: Any
) -> None:
    """Renewing spec.renewTime keeps the agent past the first ttl (status.expireTime moves and
    the token still works); once renewals stop the lease expires and its token gets 401. Neither
    the lease's token nor the pool's is in any status, Event, operator log or agent log."""
    api.create("agentpools", namespace, "p", bound_pool("bound", minSize=1))
    wait_for(lambda: pool_status(api, namespace, "p").get("available") == 1, 60)
    lease(api, namespace, "chat", "p", ttlSeconds=8, context=CONTEXT)
    bound_agent(api, namespace, "chat")
    token, status = lease_token(api, namespace, "chat")
    first = expire_epoch(api, namespace, "chat")
    while time.time() < first + 4:
        renew(api, namespace, "chat")
        time.sleep(1)
        assert lease_phase(api, namespace, "chat") == "Bound"
    assert expire_epoch(api, namespace, "chat") > first
    assert invoke(status["endpoint"], token) == (
        200,
        {"output": {"lease": "chat", "context": CONTEXT}},
    )
    wait_for(lambda: lease_phase(api, namespace, "chat") == "Expired", 60, message="expired")
    assert call(status["endpoint"], "/status", token)[0] == 401

    pool_token = secret_token(api, namespace, "p-agent-token")
    shown = json.dumps(
        [
            api.get("agentpools", namespace, "p"),
            api.get("agentleases", namespace, "chat"),
            api.events(namespace),
        ]
    )
    logs = [operator_cluster.operator.log()] + [
        api.core.read_namespaced_pod_log(pod["metadata"]["name"], namespace)
        for pod in api.pods(namespace, "p")
    ]
    for secret in (token, pool_token):
        assert secret not in shown
        assert not [log for log in logs if secret in log]


def test_the_context_reaches_the_agent_at_bind_and_not_the_next_holder(
    api: Api, namespace: str
) -> None:
    """A lease's context is its agent's while bound; after release the same agent, bound to the
    next lease, sees that lease's (none) and not the earlier one, whose token it refuses."""
    api.create("agentpools", namespace, "p", bound_pool("bound", minSize=1))
    wait_for(lambda: pool_status(api, namespace, "p").get("available") == 1, 60)
    lease(api, namespace, "first", "p", context=CONTEXT)
    agent = bound_agent(api, namespace, "first")
    first, status = lease_token(api, namespace, "first")
    assert invoke(status["endpoint"], first) == (
        200,
        {"output": {"lease": "first", "context": CONTEXT}},
    )
    api.delete("agentleases", namespace, "first")
    wait_for(lambda: not api.exists("agentleases", namespace, "first"), 60, message="first gone")
    wait_for(lambda: pool_status(api, namespace, "p").get("available") == 1, 30)

    lease(api, namespace, "next", "p")
    assert bound_agent(api, namespace, "next") == agent
    second, _ = lease_token(api, namespace, "next")
    assert invoke(status["endpoint"], second) == (
        200,
        {"output": {"lease": "next", "context": None}},
    )
    assert invoke(status["endpoint"], first)[0] == 401


def test_an_agent_without_bind_fails_the_lease_and_gives_out_no_token(
    api: Api, namespace: str
) -> None:
    """A pool whose agent serves no /bind fails a lease as BindUnsupported, naming the agent and
    the pool; the lease names no Secret (the pool's token is never handed out instead), and the
    agent is back in the pool."""
    api.create("agentpools", namespace, "old", bound_pool("nobind", minSize=1))
    wait_for(lambda: pool_status(api, namespace, "old").get("available") == 1, 60)
    [agent] = endpoints(api, namespace, "old")
    lease(api, namespace, "chat", "old")
    status = wait_for(
        lambda: (s := api.status("agentleases", namespace, "chat")).get("phase") == "Failed" and s,
        60,
        message="lease failed",
    )
    assert status["reason"] == "BindUnsupported"
    assert f"agent {agent} of pool old" in status["message"]
    assert [field for field in ("agent", "endpoint", "tokenSecretRef") if field in status] == []
    assert "chat-lease-token" not in secret_names(api, namespace)
    wait_for(lambda: pool_status(api, namespace, "old").get("available") == 1, 30)


def test_a_context_over_the_limit_fails_the_lease(api: Api, namespace: str) -> None:
    """A context over 64 KiB as compact JSON fails the lease as ContextTooLarge, with its size
    and the limit, and takes no agent."""
    api.create("agentpools", namespace, "p", bound_pool("bound", minSize=1))
    wait_for(lambda: pool_status(api, namespace, "p").get("available") == 1, 60)
    lease(api, namespace, "big", "p", context={"blob": "x" * 70_000})
    status = wait_for(
        lambda: (s := api.status("agentleases", namespace, "big")).get("phase") == "Failed" and s,
        60,
        message="lease failed",
    )
    assert status["reason"] == "ContextTooLarge"
    assert "70011 bytes" in status["message"]
    assert "65536" in status["message"]
    assert pool_status(api, namespace, "p").get("available") == 1


def test_a_lease_whose_secret_outlived_a_restart_mid_bind_opens_its_agent_with_that_token(
    api: Api, namespace: str
) -> None:
    """A lease whose token Secret was written before it could say Bound (the operator restarted
    mid-bind) is bound to a fresh agent later: the token its client reads from that Secret is
    the one the agent accepts, until the lease is deleted."""
    api.create("agentpools", namespace, "p", bound_pool("bound", minSize=1, maxSize=1))
    wait_for(lambda: pool_status(api, namespace, "p").get("available") == 1, 60)
    lease(api, namespace, "first", "p", ttlSeconds=120)
    bound_agent(api, namespace, "first")
    lease(api, namespace, "second", "p", ttlSeconds=120, checkoutTimeoutSeconds=120)
    wait_for(lambda: lease_phase(api, namespace, "second") == "Pending", 30)
    written = "token-written-before-a-restart"
    body = api.get("agentleases", namespace, "second")
    api.core.create_namespaced_secret(namespace, lease_token_secret(body, "p", written))
    api.delete("agentleases", namespace, "first")
    held = bound_agent(api, namespace, "second")
    token, _ = lease_token(api, namespace, "second")
    assert token == written
    own = endpoints(api, namespace, "p")[held]
    assert call(own, "/status", token)[0] == 200
    assert invoke(own, token) == (200, {"output": {"lease": "second", "context": None}})
    api.delete("agentleases", namespace, "second")
    wait_for(lambda: call(own, "/status", token)[0] == 401, 30, message="the token refused")
