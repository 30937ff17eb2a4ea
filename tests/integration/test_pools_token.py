"""The pool's agent token Secret on the local cluster: losing it costs the user nothing.

The token is the operator's own credential. A deleted Secret is re-created with the same token
while the operator runs; one missing when the operator starts gets a new token, and agents
holding the old one are replaced. An agent answering 401 never fails an item.
"""

from __future__ import annotations

from typing import Any

from operator_support import Api, kill_agent, pool_spec, ready
from run_support import finished_run, ready_pool, start_run

from cluster import wait_for


def secret_exists(api: Api, namespace: str, name: str) -> bool:
    return any(s.metadata.name == name for s in api.core.list_namespaced_secret(namespace).items)


def event_saying(api: Api, namespace: str, reason: str) -> str:
    found: str = wait_for(
        lambda: next(
            (e.get("message", "") for e in api.events(namespace) if e.get("reason") == reason),
            "",
        ),
        20,
        message=f"an Event {reason}",
    )
    return found


def test_a_deleted_token_secret_is_recreated_and_new_agents_start(api: Api, namespace: str) -> None:
    """Delete the token Secret of a running pool, then lose its agent: the replacement turns
    Ready (not stuck in CreateContainerConfigError), as the operator re-creates the Secret
    before it creates the agent and says so in an Event, and a run through the pool succeeds.
    A steady pool looks for its Secret once in five minutes only; what needs it is a new agent."""
    api.create("agentpools", namespace, "p", pool_spec("echo", minSize=1))
    ready_pool(api, namespace, "p", 1)
    api.core.delete_namespaced_secret("p-agent-token", namespace)
    (old,) = api.live_pods(namespace, "p")
    kill_agent(old)
    wait_for(
        lambda: any(
            ready(pod) and pod["metadata"]["name"] != old["metadata"]["name"]
            for pod in api.live_pods(namespace, "p")
        ),
        30,
        message="a replacement agent Ready",
    )
    assert secret_exists(api, namespace, "p-agent-token")
    assert "p-agent-token" in event_saying(api, namespace, "TokenSecretRecreated")
    items: list[Any] = [{"id": f"i{n}"} for n in range(4)]
    start_run(api, namespace, "after", items, poolRef={"name": "p"}, itemId="id")
    status = finished_run(api, namespace, "after")
    assert (status["phase"], status["succeeded"], status["failed"]) == ("Succeeded", 4, 0)


def test_a_token_minted_after_a_restart_rolls_old_agents_and_fails_no_item(
    api: Api, namespace: str, operator_cluster: Any
) -> None:
    """The Secret goes while the operator is down: the restarted operator mints a new token,
    says so in an Event, replaces the agents that hold the old one, and a run started at once
    succeeds with no item failed for the operator's own credential."""
    api.create("agentpools", namespace, "p", pool_spec("echo", minSize=2))
    ready_pool(api, namespace, "p", 2)
    before = {pod["metadata"]["name"] for pod in api.live_pods(namespace, "p")}
    operator_cluster.operator.kill()
    try:
        api.core.delete_namespaced_secret("p-agent-token", namespace)
    finally:
        operator_cluster.operator.start()
    items: list[Any] = [{"id": f"i{n}"} for n in range(10)]
    start_run(api, namespace, "rolled", items, poolRef={"name": "p"}, itemId="id", cap=2)
    status = finished_run(api, namespace, "rolled")
    assert (status["phase"], status["succeeded"], status["failed"]) == ("Succeeded", 10, 0)
    assert "p-agent-token" in event_saying(api, namespace, "TokenRotated")
    wait_for(
        lambda: not before & {pod["metadata"]["name"] for pod in api.live_pods(namespace, "p")},
        30,
        message="agents with the old token replaced",
    )
    ready_pool(api, namespace, "p", 2)
