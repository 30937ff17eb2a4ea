"""Callers that go away: no checkout of the gateway is ever leaked.

A caller that disconnects while it waits leaves the pool's line at once; one that disconnects
mid-call gets nothing, and its agent comes back once the item it was given ends, as poolboy's
transaction guarantees. A hundred of each leave every agent idle and nobody waiting, with no
agent retired for it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gateway_support import Gateway, caller_token
from operator_support import Api
from test_gateway import idle_again, ready_pool

from cluster import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

CALLERS = 100


def test_callers_gone_while_waiting_leave_the_line(api: Api, namespace: str) -> None:
    """A hundred calls wait for the pool's one agent, held by a lease, and go away: the line is
    empty again, and once the lease ends the same agent is idle and serves the next call."""
    pool = ready_pool(api, namespace, agent="slow_start", env={"SLOW_START_SECONDS": "0"})
    agents = {pod["metadata"]["name"] for pod in api.pods(namespace, pool)}
    gateway = Gateway.of(api, namespace)
    token = caller_token(api, namespace, "caller", bound=True)
    assert gateway.call(pool, 1, token=token).status == 200  # the caller's access is known
    api.create("agentleases", namespace, "hold", {"poolRef": {"name": pool}, "ttlSeconds": 300})
    wait_for(lambda: api.status("agentleases", namespace, "hold").get("phase") == "Bound", 60)
    sockets = [
        gateway.open_request(pool, {"item": n, "checkoutTimeoutSeconds": 300}, token=token)
        for n in range(CALLERS)
    ]
    wait_for(
        lambda: api.status("agentpools", namespace, pool).get("waiting") == CALLERS,
        60,
        message=f"{CALLERS} calls waiting",
    )
    for sock in sockets:
        sock.close()
    wait_for(lambda: api.status("agentpools", namespace, pool).get("waiting") == 0, 60)
    api.delete("agentleases", namespace, "hold")
    idle_again(api, namespace, pool, 1)
    assert {pod["metadata"]["name"] for pod in api.live_pods(namespace, pool)} == agents
    assert gateway.call(pool, 1, token=token, wait=False).status == 200


def test_callers_gone_mid_call_leave_every_agent_idle(
    api: Api, namespace: str, tmp_path: Path
) -> None:
    """A hundred calls go away once their agent has begun their item: each agent comes back
    when its item ends, none is retired, and the pool serves the next call at once."""
    record = tmp_path / "invocations.jsonl"
    agents = 4
    pool = ready_pool(
        api,
        namespace,
        agents=agents,
        agent="slow_start",
        env={"SLOW_START_SECONDS": "0", "WORK_SECONDS": "0.3", "INVOCATIONS_FILE": str(record)},
    )
    names = {pod["metadata"]["name"] for pod in api.pods(namespace, pool)}
    gateway = Gateway.of(api, namespace)
    token = caller_token(api, namespace, "caller", bound=True)

    def started() -> set[str]:
        lines = record.read_text().splitlines() if record.exists() else []
        return {json.loads(line)["id"] for line in lines}

    for first in range(0, CALLERS, agents):
        ids = [f"gone-{n}" for n in range(first, first + agents)]
        sockets = [
            gateway.open_request(
                pool, {"item": n, "id": n, "checkoutTimeoutSeconds": 300}, token=token
            )
            for n in ids
        ]
        wait_for(lambda ids=ids: set(ids) <= started(), 60, message=f"{ids} begun")
        for sock in sockets:
            sock.close()
    assert len(started()) == CALLERS
    idle_again(api, namespace, pool, agents)
    assert {pod["metadata"]["name"] for pod in api.live_pods(namespace, pool)} == names
    assert gateway.call(pool, 1, token=token, wait=False).status == 200
