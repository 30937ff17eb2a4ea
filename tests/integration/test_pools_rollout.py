"""Rollouts of a changed AgentPool template on the local cluster: the pool rolls within
maxSurge and maxUnavailable and reports Progressing True RolloutComplete with updatedReplicas
equal to replicas once done; a template whose pods never turn Ready stops at maxUnavailable,
the old agents still serving, and Progressing turns False ProgressDeadlineExceeded naming the
new pods."""

from __future__ import annotations

from typing import Any

from operator_support import Api, pool_spec, ready
from pool_support import bound_agent, lease, pool_status

from cluster import wait_for


def progressing(api: Api, namespace: str, name: str) -> dict[str, Any]:
    """The pool's Progressing condition as last written, {} before it is."""
    conditions = pool_status(api, namespace, name).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Progressing"), {})


def names(pods: list[dict[str, Any]]) -> set[str]:
    return {pod["metadata"]["name"] for pod in pods}


def test_a_template_change_rolls_within_bounds_and_reports_complete(
    api: Api, namespace: str
) -> None:
    """Four agents, maxSurge 1, maxUnavailable 0: every agent is replaced, never fewer than four
    Ready nor more than five pods seen, and Progressing says RolloutComplete for the new
    generation with updatedReplicas == replicas."""
    bounds = {"minSize": 4, "maxSurge": 1, "maxUnavailable": 0}
    api.create("agentpools", namespace, "roll", pool_spec(**bounds))
    wait_for(lambda: pool_status(api, namespace, "roll").get("available") == 4, 90)
    old = names(api.live_pods(namespace, "roll"))
    api.patch_spec("agentpools", namespace, "roll", pool_spec(env={"VERSION": "2"}, **bounds))
    generation = api.get("agentpools", namespace, "roll")["metadata"]["generation"]
    seen_ready: list[int] = []
    seen_pods: list[int] = []

    def complete() -> bool:
        pods = api.live_pods(namespace, "roll")
        seen_ready.append(sum(1 for pod in pods if ready(pod)))
        seen_pods.append(len(pods))
        condition = progressing(api, namespace, "roll")
        status = pool_status(api, namespace, "roll")
        return (
            condition.get("reason") == "RolloutComplete"
            and condition.get("status") == "True"
            and condition.get("observedGeneration") == generation
            and status.get("updatedReplicas") == status.get("replicas") == 4
            and not old & names(pods)
        )

    wait_for(complete, 120, interval=0.05, message="rollout complete")
    assert min(seen_ready) >= 4
    assert max(seen_pods) <= 5


def test_a_template_that_never_turns_ready_stops_with_the_old_agents_serving(
    api: Api, namespace: str
) -> None:
    """New pods whose readiness probe always fails: three of four old agents stay (maxUnavailable
    1), a lease still gets one of them, and after progressDeadlineSeconds Progressing is False
    ProgressDeadlineExceeded, naming the new pods."""
    bounds = {"minSize": 4, "maxSurge": 1, "maxUnavailable": 1, "progressDeadlineSeconds": 3}
    api.create("agentpools", namespace, "stuck", pool_spec(**bounds))
    wait_for(lambda: pool_status(api, namespace, "stuck").get("available") == 4, 90)
    old = names(api.live_pods(namespace, "stuck"))
    never = {"readinessProbe": {"httpGet": {"path": "/never-ready"}}}
    api.patch_spec("agentpools", namespace, "stuck", pool_spec(**bounds, **never))

    condition = wait_for(
        lambda: (
            (c := progressing(api, namespace, "stuck")).get("reason") == "ProgressDeadlineExceeded"
            and c
        ),
        60,
        message="Progressing False ProgressDeadlineExceeded",
    )
    assert condition["status"] == "False"
    pods = api.live_pods(namespace, "stuck")
    new = names(pods) - old
    assert new
    assert all(name in condition["message"] for name in new)
    serving = {pod["metadata"]["name"] for pod in pods if ready(pod)}
    assert serving == old & names(pods)
    assert len(serving) == 3
    assert len(pods) <= 5
    lease(api, namespace, "still", "stuck")
    assert bound_agent(api, namespace, "still") in old
