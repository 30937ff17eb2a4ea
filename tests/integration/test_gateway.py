"""The gateway: a pool's call and cast over HTTPS, as a program in the cluster would send them.

Each test works in a namespace of its own with callers that are ServiceAccounts holding tokens
from the TokenRequest API, bound (or not) to a role granting ``create`` on ``agentpools/call``
and ``agentpools/cast``. The operator checks them with TokenReview and SubjectAccessReview, on
the local cluster as on the real control plane.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from gateway_support import (
    Gateway,
    Reply,
    bind_caller,
    caller_token,
    chart_caller_role,
    unbind_caller,
)
from operator_support import REPO, Api, pool_spec

from cluster import Kubectl, wait_for
from docblocks import block_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

#: The longest a decision is kept (the operator's GatewaySettings.access_seconds), and the slack
#: a loaded machine may add to seeing it lapse.
ACCESS_SECONDS, SLACK = 10.0, 20.0


def ready_pool(api: Api, namespace: str, name: str = "p", agents: int = 1, **spec: Any) -> str:
    api.create(
        "agentpools",
        namespace,
        name,
        pool_spec(spec.pop("agent", "echo"), minSize=agents, **spec),
    )
    wait_for(
        lambda: api.status("agentpools", namespace, name).get("readyReplicas") == agents,
        120,
        message=f"{agents} agents of {name} Ready",
    )
    return name


def idle_again(api: Api, namespace: str, pool: str, agents: int) -> dict[str, Any]:
    """The pool's status once every agent is idle and nobody waits."""
    return wait_for(
        lambda: (
            (s := api.status("agentpools", namespace, pool)).get("busy") == 0
            and s.get("waiting") == 0
            and s.get("available") == agents
            and s
        ),
        90,
        message="every agent idle and nobody waiting",
    )


def test_a_bound_caller_calls_and_casts_and_others_are_refused(api: Api, namespace: str) -> None:
    """A caller bound to the caller role gets the agent's output (200) and a cast taken (202),
    both naming the agent; a caller bound to nothing gets 403, a bad or missing token 401. The
    ConfigMap gives the URL and the CA the gateway's certificate is checked with."""
    pool = ready_pool(api, namespace, agents=2)
    gateway = Gateway.of(api, namespace)
    assert gateway.url.startswith("https://")
    pods = {pod["metadata"]["name"] for pod in api.pods(namespace, pool)}
    token = caller_token(api, namespace, "caller", bound=True)

    called = gateway.call(pool, {"text": "hello", "n": [1, 2]}, token=token)
    assert called.status == 200, called
    assert called.body["output"] == {"text": "hello", "n": [1, 2]}
    assert called.body["agent"] in pods
    cast = gateway.cast(pool, {"text": "later"}, token=token)
    assert cast.status == 202, cast
    assert cast.body["agent"] in pods

    stranger = caller_token(api, namespace, "stranger", bound=False)
    refused = gateway.call(pool, 1, token=stranger)
    assert (refused.status, refused.reason) == (403, "Forbidden")
    assert f"system:serviceaccount:{namespace}:stranger" in refused.body["error"]["message"]
    assert "agentpools/call" in refused.body["error"]["message"]
    for bad in (None, "not-a-token"):
        reply = gateway.call(pool, 1, token=bad)  # type: ignore[arg-type]
        assert (reply.status, reply.reason) == (401, "Unauthorized")
    idle_again(api, namespace, pool, 2)


def test_a_revoked_binding_is_refused_within_the_cache_time(api: Api, namespace: str) -> None:
    """Deleting the caller's RoleBinding turns its 200s into 403s within the time a decision is
    kept, and binding it again lets it call again."""
    pool = ready_pool(api, namespace)
    gateway = Gateway.of(api, namespace)
    token = caller_token(api, namespace, "caller", bound=True)
    assert gateway.call(pool, 1, token=token).status == 200
    unbind_caller(api, namespace, "caller")
    revoked = time.monotonic()
    wait_for(
        lambda: gateway.call(pool, 1, token=token).status == 403,
        ACCESS_SECONDS + SLACK,
        interval=0.5,
        message="403 once the RoleBinding is gone",
    )
    assert time.monotonic() - revoked <= ACCESS_SECONDS + SLACK
    bind_caller(api, namespace, "caller")
    wait_for(
        lambda: gateway.call(pool, 1, token=token).status == 200,
        ACCESS_SECONDS + SLACK,
        interval=0.5,
        message="200 again once bound again",
    )


def test_each_error_has_its_status_and_reason(api: Api, namespace: str) -> None:
    """Bodies, paths and methods the gateway cannot serve are answered with the status the
    reason stands for, and a message that names what is wrong."""
    pool = ready_pool(api, namespace, agent="slow_start", env={"SLOW_START_SECONDS": "0"})
    gateway = Gateway.of(api, namespace)
    token = caller_token(api, namespace, "caller", bound=True)
    cases: list[tuple[Reply, int, str, str]] = [
        (gateway.send(pool, None, token=token, raw=b"{not json"), 400, "Invalid", "not JSON"),
        (gateway.send(pool, [1], token=token), 400, "Invalid", '"item"'),
        (gateway.send(pool, {"input": 1}, token=token), 400, "Invalid", "item: required"),
        (gateway.call(pool, 1, token=token, priorty=2), 400, "Invalid", "priorty: unknown"),
        (gateway.call(pool, 1, token=token, priority="2"), 400, "Invalid", "priority"),
        (
            gateway.call(pool, 1, token=token, checkoutTimeoutSeconds=0),
            400,
            "Invalid",
            "checkoutTimeoutSeconds",
        ),
        (gateway.call("absent", 1, token=token), 404, "NotFound", '"absent" not found'),
        (gateway.send(pool, None, token=token, path="/v1/elsewhere"), 404, "NotFound", "path"),
        (gateway.send(pool, None, token=token, method="GET"), 405, "MethodNotAllowed", "POST"),
        (
            gateway.send(pool, None, token=token, raw=b'{"item": "' + b"x" * (4 << 20) + b'"}'),
            413,
            "TooLarge",
            "limit",
        ),
        (
            gateway.call(pool, {"fail": True, "message": "bad input"}, token=token),
            502,
            "HandlerError",
            "bad input",
        ),
        (
            gateway.call(pool, {"workSeconds": 5}, token=token, callTimeoutSeconds=0.5),
            504,
            "CallTimeout",
            "0.5",
        ),
    ]
    for reply, status, reason, words in cases:
        assert (reply.status, reply.reason) == (status, reason), reply
        assert words in reply.body["error"]["message"], reply
    # The agent whose call timed out is retired and replaced; the pool serves again.
    wait_for(
        lambda: gateway.call(pool, 1, token=token, checkoutTimeoutSeconds=60).status == 200,
        120,
        message="the pool serves after its timed-out agent was replaced",
    )


def _hold(gateway: Gateway, pool: str, token: str, seconds: float) -> threading.Thread:
    """A call that keeps the pool's one agent busy for ``seconds`` in a thread."""
    thread = threading.Thread(
        target=gateway.call, args=(pool, {"workSeconds": seconds}), kwargs={"token": token}
    )
    thread.start()
    return thread


def test_a_full_pool_answers_503_or_429_with_retry_after(api: Api, namespace: str) -> None:
    """With its one agent busy, a call that will not wait gets 503 PoolExhausted with the pool's
    numbers, one that waits past its checkout timeout 503 too, and one past the waiting line's
    bound 429 TooManyWaiters; each says when to try again."""
    pool = ready_pool(
        api, namespace, agent="slow_start", env={"SLOW_START_SECONDS": "0"}, maxWaiters=1
    )
    gateway = Gateway.of(api, namespace)
    token = caller_token(api, namespace, "caller", bound=True)
    holder = _hold(gateway, pool, token, 30)
    wait_for(lambda: api.status("agentpools", namespace, pool).get("busy") == 1, 30)

    at_once = gateway.call(pool, 1, token=token, wait=False)
    assert (at_once.status, at_once.reason) == (503, "PoolExhausted"), at_once
    assert "minSize 1, maxSize 1" in at_once.body["error"]["message"]
    assert int(at_once.headers["Retry-After"]) >= 1
    timed_out = gateway.call(pool, 1, token=token, checkoutTimeoutSeconds=0.5)
    assert (timed_out.status, timed_out.reason) == (503, "PoolExhausted"), timed_out

    waiting = threading.Thread(
        target=gateway.call, args=(pool, 1), kwargs={"token": token, "checkoutTimeoutSeconds": 60}
    )
    waiting.start()
    wait_for(lambda: api.status("agentpools", namespace, pool).get("waiting") == 1, 30)
    full = gateway.call(pool, 1, token=token)
    assert (full.status, full.reason) == (429, "TooManyWaiters"), full
    assert "maxWaiters 1" in full.body["error"]["message"]
    assert int(full.headers["Retry-After"]) >= 1
    holder.join(60)
    waiting.join(60)
    idle_again(api, namespace, pool, 1)


def test_calls_wait_in_the_pools_line_by_priority_with_runs(
    api: Api, namespace: str, tmp_path: Path
) -> None:
    """A call of priority 2 that waits behind a run's item of priority 1 goes first when the
    agent comes free: the runs, leases and calls of a pool wait in one line."""
    record = tmp_path / "invocations.jsonl"
    pool = ready_pool(
        api,
        namespace,
        agent="slow_start",
        env={"SLOW_START_SECONDS": "0", "INVOCATIONS_FILE": str(record)},
    )
    gateway = Gateway.of(api, namespace)
    token = caller_token(api, namespace, "caller", bound=True)
    api.create("agentleases", namespace, "hold", {"poolRef": {"name": pool}, "ttlSeconds": 300})
    wait_for(lambda: api.status("agentleases", namespace, "hold").get("phase") == "Bound", 60)
    run = {
        "poolRef": {"name": pool},
        "priority": 1,
        "checkoutTimeoutSeconds": 120,
        "source": {"items": [{"id": "from-run"}]},
        "itemId": "id",
    }
    api.create("poolruns", namespace, "r", run)
    wait_for(lambda: api.status("agentpools", namespace, pool).get("waiting") == 1, 60)
    answers: list[Reply] = []
    call = threading.Thread(
        target=lambda: answers.append(
            gateway.call(pool, {"id": "from-call"}, token=token, priority=2, id="from-call")
        )
    )
    call.start()
    wait_for(lambda: api.status("agentpools", namespace, pool).get("waiting") == 2, 60)
    api.delete("agentleases", namespace, "hold")
    call.join(120)
    assert answers[0].status == 200, answers
    wait_for(lambda: api.status("poolruns", namespace, "r").get("phase") == "Succeeded", 120)
    order = [json.loads(line)["id"] for line in record.read_text().splitlines()]
    assert order == ["from-call", "from-run"]


def test_waiting_calls_grow_the_pool_into_overflow(api: Api, namespace: str) -> None:
    """A call that finds every agent busy counts as demand: the pool grows into its overflow to
    serve it, and the overflow goes once idle again."""
    pool = ready_pool(
        api,
        namespace,
        agent="slow_start",
        env={"SLOW_START_SECONDS": "0"},
        maxSize=2,
        idleTimeoutSeconds=2,
    )
    gateway = Gateway.of(api, namespace)
    token = caller_token(api, namespace, "caller", bound=True)
    holder = _hold(gateway, pool, token, 20)
    wait_for(lambda: api.status("agentpools", namespace, pool).get("busy") == 1, 30)
    second = gateway.call(pool, {"n": 2}, token=token, checkoutTimeoutSeconds=120)
    assert second.status == 200, second
    assert len(api.live_pods(namespace, pool)) == 2
    holder.join(60)
    wait_for(lambda: len(api.live_pods(namespace, pool)) == 1, 60, message="overflow removed")


def guide_calls() -> str:
    """The shell lines of the manual's gateway guide, as printed."""
    return block_for(
        "tests/integration/test_gateway.py::test_the_guides_curl_calls_a_pool_as_printed",
        REPO / "docs" / "guides" / "gateway.md",
    ).text


def test_the_guides_curl_calls_a_pool_as_printed(
    api: Api, namespace: str, kubectl_op: Kubectl, operator_cluster: Any, tmp_path: Path
) -> None:
    """The gateway guide's commands, run by bash as printed in a namespace of the test's own,
    make a caller bound to the chart's ``agentpool-caller``, see that it may call, and get the
    quickstart pool's output for one item with curl. The local cluster has that role from its
    start; a real cluster has it from the chart."""
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed here")
    if operator_cluster.handle.local:
        _run_guide_calls(api, namespace, kubectl_op, tmp_path)
        return
    with chart_caller_role(api):
        _run_guide_calls(api, namespace, kubectl_op, tmp_path)


def _run_guide_calls(api: Api, namespace: str, kubectl_op: Kubectl, tmp_path: Path) -> None:
    config = yaml.safe_load(kubectl_op.kubeconfig.read_text())
    if kubectl_op.context:
        config["current-context"] = kubectl_op.context
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    script = guide_calls().replace("NS=default", f"NS={namespace}", 1)
    script = script.replace("examples/", f"{REPO}/examples/")
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "PATH": f"{Path(kubectl_op.binary).parent}{os.pathsep}{os.environ['PATH']}",
    }
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert "yes" in lines
    answer = json.loads(lines[-1])
    assert answer["output"]["length"] == len('{"text":"hi"}')
    assert answer["agent"].startswith("quickstart-")
