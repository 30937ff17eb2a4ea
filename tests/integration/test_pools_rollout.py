"""Rollouts of a changed AgentPool template on the local cluster: the pool rolls within
maxSurge and maxUnavailable and reports Progressing True RolloutComplete with updatedReplicas
equal to replicas once done; a template whose pods never turn Ready stops at maxUnavailable,
the old agents still serving, and Progressing turns False ProgressDeadlineExceeded naming the
new pods; a template whose agents crash keeps the pods not Ready within maxUnready at every
moment a watch of the pods sees, failed pods kept for a look included."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kubernetes import watch
from operator_support import Api, pool_spec, ready
from pool_support import bound_agent, lease, pool_status

from cluster import Kubectl, wait_for
from docblocks import REPO, block_for, namespaced_kubeconfig, run_shell_block


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


def crashing(**spec: Any) -> dict[str, Any]:
    """A pool spec whose agent exits with code 3 as soon as it starts."""
    container = {"name": "agent", "command": ["python", "-c", "import sys; sys.exit(3)"]}
    return {**pool_spec(**spec), "template": {"spec": {"containers": [container]}}}


def test_a_crashing_template_keeps_the_pods_not_ready_within_max_unready(
    api: Api, namespace: str
) -> None:
    """Three agents, maxUnavailable 1, maxUnready 2, then a template whose agent exits with
    code 3: a watch of the pool's pods, from before the change until four new pods have
    failed, never sees more than two pods not Ready at once (failed pods kept for a look and
    pods on their way out count as a watcher counts them), nor fewer than two Ready old agents,
    and the pool says CrashLoopBackOff."""
    bounds = {"minSize": 3, "maxUnavailable": 1, "maxUnready": 2}
    api.create("agentpools", namespace, "crash", pool_spec(**bounds))
    wait_for(lambda: pool_status(api, namespace, "crash").get("available") == 3, 90)
    listed = api.core.list_namespaced_pod(namespace, label_selector="agentpool.dev/pool=crash")
    pods = {pod.metadata.name: api.client.sanitize_for_serialization(pod) for pod in listed.items}
    old = set(pods)
    version = listed.metadata.resource_version
    api.patch_spec("agentpools", namespace, "crash", crashing(**bounds))
    failed: set[str] = set()
    deadline = time.monotonic() + 150
    while len(failed) < 4:
        remaining = int(deadline - time.monotonic())
        assert remaining > 0, f"only {sorted(failed)} of the new pods failed in time"
        # A watch the server ends early is taken up again where it stopped.
        for event in watch.Watch().stream(
            api.core.list_namespaced_pod,
            namespace,
            label_selector="agentpool.dev/pool=crash",
            resource_version=version,
            timeout_seconds=remaining,
        ):
            pod = api.client.sanitize_for_serialization(event["object"])
            name = pod["metadata"]["name"]
            version = pod["metadata"]["resourceVersion"]
            if event["type"] == "DELETED":
                pods.pop(name, None)
            else:
                pods[name] = pod
            if name not in old and (pod.get("status") or {}).get("phase") == "Failed":
                failed.add(name)
            not_ready = sorted(each for each, seen in pods.items() if not ready(seen))
            serving = sorted(each for each, seen in pods.items() if ready(seen) and each in old)
            assert len(not_ready) <= 2, f"{len(not_ready)} pods not Ready at once: {not_ready}"
            assert len(serving) >= 2, f"old agents serving: {serving}, not Ready: {not_ready}"
            if len(failed) >= 4:
                break
    wait_for(
        lambda: any(
            (c["type"], c["status"], c["reason"]) == ("Degraded", "True", "CrashLoopBackOff")
            for c in pool_status(api, namespace, "crash").get("conditions") or []
        ),
        30,
        message="Degraded True CrashLoopBackOff",
    )


def test_the_guides_wait_ends_with_every_agent_new(
    api: Api, namespace: str, kubectl_op: Kubectl, tmp_path: Path
) -> None:
    """The rollout guide's patch and waits, run by bash as printed: when they return, the pool
    has seen the new image and every agent is a new one, Ready, with Progressing True
    RolloutComplete for that generation, not the completed roll of the spec before."""
    api.create("agentpools", namespace, "quickstart", pool_spec(minSize=2))
    wait_for(lambda: pool_status(api, namespace, "quickstart").get("available") == 2, 90)
    wait_for(
        lambda: progressing(api, namespace, "quickstart").get("reason") == "RolloutComplete",
        30,
        message="the first roll reported complete",
    )
    old = names(api.live_pods(namespace, "quickstart"))
    kubeconfig = namespaced_kubeconfig(
        kubectl_op.kubeconfig, kubectl_op.context, namespace, tmp_path / "kubeconfig"
    )
    block = block_for(
        "tests/integration/test_pools_rollout.py::test_the_guides_wait_ends_with_every_agent_new",
        REPO / "docs" / "guides" / "rollouts-and-refill.md",
    )
    done = run_shell_block(
        block,
        kubeconfig=kubeconfig,
        bindir=Path(kubectl_op.binary).parent,
        cwd=tmp_path,
        timeout=360,
    )
    assert done.returncode == 0, done.stderr
    pool = api.get("agentpools", namespace, "quickstart")
    assert pool["spec"]["image"] == "agentpool:0.2.0"
    condition = progressing(api, namespace, "quickstart")
    assert (condition["status"], condition["reason"]) == ("True", "RolloutComplete")
    assert condition["observedGeneration"] == pool["metadata"]["generation"]
    status = pool_status(api, namespace, "quickstart")
    assert status["updatedReplicas"] == status["readyReplicas"] == 2
    pods = api.live_pods(namespace, "quickstart")
    assert not old & names(pods)
    assert sum(1 for pod in pods if ready(pod)) >= 2
