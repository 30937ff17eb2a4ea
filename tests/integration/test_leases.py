"""AgentLease on a cluster with the real operator: how a lease ends, as a client and kopf see it.

Each test proves one promise of the AgentLease resource through the public surface: the
kubernetes client, kubectl, and the operator's own log.
"""

from __future__ import annotations

from typing import Any

from kubernetes import watch
from operator_support import GROUP, VERSION, Api, pool_spec
from pool_support import bound_agent, lease, pool_status

from cluster import wait_for

#: What kopf logs when it has to cancel a handler, or give up on one, because it did not end by
#: itself once stopped.
KOPF_CANCELLED = ("is cancelled. Will escalate", "did not exit in time")


#: What a client could use to reach a lease's agent; gone from status once the lease ends.
REACH = ("agent", "endpoint", "tokenSecretRef")


def kopf_cancellations(log: str) -> int:
    return sum(log.count(words) for words in KOPF_CANCELLED)


def conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {cond["type"]: cond for cond in status.get("conditions") or []}


def kubectl_wait(kubectl: Any, namespace: str, lease: str, condition: str) -> None:
    kubectl(
        "wait",
        f"--for=condition={condition}",
        f"agentlease/{lease}",
        "-n",
        namespace,
        "--timeout=60s",
        timeout=70,
    )


def test_kubectl_waits_for_a_lease_to_bind_expire_or_fail(
    api: Api, namespace: str, kubectl_op: Any
) -> None:
    """`kubectl wait --for=condition=Bound` returns once a lease holds an agent, and the condition
    names its pod; `--for=condition=Expired` returns once one passes its ttl, and
    `--for=condition=Failed` once one cannot be served. An ended lease shows no agent, endpoint or
    token Secret a client could still use, and Bound is False saying why."""
    api.create("agentpools", namespace, "p", pool_spec(minSize=2))
    wait_for(lambda: pool_status(api, namespace, "p").get("available") == 2, 60)
    lease(api, namespace, "chat", "p")
    lease(api, namespace, "brief", "p", ttlSeconds=2)
    lease(api, namespace, "astray", "absent")

    kubectl_wait(kubectl_op, namespace, "chat", "Bound")
    held = api.status("agentleases", namespace, "chat")
    bound = conditions(held)["Bound"]
    assert (bound["status"], bound["reason"]) == ("True", "Bound")
    assert held["agent"] in bound["message"]
    assert held["endpoint"].startswith("http://")
    assert {conditions(held)[kind]["status"] for kind in ("Expired", "Failed")} == {"False"}

    kubectl_wait(kubectl_op, namespace, "brief", "Expired")
    expired = api.status("agentleases", namespace, "brief")
    assert expired["phase"] == "Expired"
    assert [field for field in REACH if field in expired] == []
    assert conditions(expired)["Expired"]["status"] == "True"
    assert (conditions(expired)["Bound"]["status"], conditions(expired)["Bound"]["reason"]) == (
        "False",
        "Expired",
    )

    kubectl_wait(kubectl_op, namespace, "astray", "Failed")
    failed = conditions(api.status("agentleases", namespace, "astray"))
    assert failed["Failed"]["reason"] == "PoolNotFound"
    assert 'AgentPool "absent" not found' in failed["Failed"]["message"]
    assert (failed["Bound"]["status"], failed["Bound"]["reason"]) == ("False", "PoolNotFound")


def test_a_deleted_lease_goes_at_once_and_its_agent_comes_back(api: Api, namespace: str) -> None:
    """A lease carries no finalizer and no state of kopf's: deleting it removes it at once,
    with nothing written to it after Bound, and its agent is back in the pool."""
    api.create("agentpools", namespace, "p", pool_spec(minSize=1))
    wait_for(lambda: pool_status(api, namespace, "p").get("available") == 1, 60)
    lease(api, namespace, "chat", "p")
    bound_agent(api, namespace, "chat")
    found = api.get("agentleases", namespace, "chat")
    assert found["metadata"].get("finalizers") in (None, [])
    assert not [key for key in found["metadata"].get("annotations") or {} if "kopf" in key]
    api.delete("agentleases", namespace, "chat")
    seen: list[str] = []
    for event in watch.Watch().stream(
        api.custom.list_namespaced_custom_object,
        GROUP,
        VERSION,
        namespace,
        "agentleases",
        resource_version=found["metadata"]["resourceVersion"],
        timeout_seconds=60,
    ):
        seen.append(event["type"])
        if event["type"] == "DELETED":
            assert event["object"]["status"]["phase"] == "Bound"
            break
    assert seen == ["DELETED"]
    wait_for(lambda: pool_status(api, namespace, "p").get("available") == 1, 30)


def test_deleting_leases_ends_their_tasks_without_kopf_cancelling_anything(
    api: Api, namespace: str, operator_cluster: Any
) -> None:
    """A deleted lease's task ends by itself, whether the lease still waits for an agent or
    holds one that goes back through a reset: kopf never cancels a handler (no "is cancelled.
    Will escalate" warning), and the agent is back in the pool."""
    api.create("agentpools", namespace, "p", pool_spec(minSize=1, resetBetweenItems=True))
    wait_for(lambda: pool_status(api, namespace, "p").get("available") == 1, 60)
    lease(api, namespace, "held", "p")
    bound_agent(api, namespace, "held")
    lease(api, namespace, "queued", "p", checkoutTimeoutSeconds=300)
    wait_for(lambda: pool_status(api, namespace, "p").get("waiting") == 1, 30)
    before = kopf_cancellations(operator_cluster.operator.log())

    api.delete("agentleases", namespace, "queued")
    wait_for(lambda: not api.exists("agentleases", namespace, "queued"), 60, message="queued gone")
    wait_for(lambda: pool_status(api, namespace, "p").get("waiting") == 0, 30)
    api.delete("agentleases", namespace, "held")
    wait_for(lambda: not api.exists("agentleases", namespace, "held"), 60, message="held gone")
    wait_for(lambda: pool_status(api, namespace, "p").get("available") == 1, 30)
    api.delete("agentpools", namespace, "p")
    wait_for(lambda: not api.exists("agentpools", namespace, "p"), 60, message="pool gone")

    log = operator_cluster.operator.log()
    assert kopf_cancellations(log) == before, log[-4000:]
