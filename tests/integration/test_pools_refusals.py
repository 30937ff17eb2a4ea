"""AgentPool pods that cannot be made or cannot turn Ready, on the local cluster and a real one.

A template's typo (``comand:``) is accepted with the pool (its template is free-form) but no pod
of it can be made: the pool says so in Degraded, in the API server's own words, before any pod
exists, backs off instead of asking once a second, posts a few Warning Events rather than one
per attempt, and recovers at once when the template is fixed. Agents that never turn Ready
hold at most maxUnready pods, not the whole pool.
"""

from __future__ import annotations

from typing import Any

from operator_support import Api, agent_command, pool_spec
from pool_support import pool_status

from cluster import wait_for

UNKNOWN_FIELD = 'strict decoding error: unknown field "spec.containers[0].comand"'


def degraded(api: Api, namespace: str, name: str) -> dict[str, Any]:
    conditions = pool_status(api, namespace, name).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Degraded"), {})


def create_failed_events(api: Api, namespace: str) -> list[str]:
    return [
        str(e.get("message"))
        for e in api.events(namespace)
        if e.get("reason") == "CreateFailed" and e.get("type") == "Warning"
    ]


def test_a_template_typo_is_reported_backs_off_and_heals_when_fixed(
    api: Api, namespace: str
) -> None:
    """Degraded CreateFailed names the unknown field while no pod exists; after four refusals
    (about 7 s of back-off) there are at most three Warning Events; fixing the template makes a
    Ready agent without waiting out the back-off."""
    typo = pool_spec(minSize=2)
    container = typo["template"]["spec"]["containers"][0]
    container["comand"] = container.pop("command")
    api.create("agentpools", namespace, "typo", typo)

    condition = wait_for(
        lambda: (c := degraded(api, namespace, "typo")).get("reason") == "CreateFailed" and c,
        30,
        message="Degraded CreateFailed",
    )
    assert condition["status"] == "True"
    assert UNKNOWN_FIELD in condition["message"]
    assert "validation error" not in condition["message"]
    assert api.pods(namespace, "typo") == []

    wait_for(
        lambda: "4 times in a row" in degraded(api, namespace, "typo").get("message", ""),
        60,
        message="the fourth refusal, after its back-off",
    )
    reported = wait_for(
        lambda: (
            (found := create_failed_events(api, namespace))
            and any("(4 times in a row)" in m for m in found)
            and found
        ),
        20,
        message="the Event of the fourth refusal",
    )
    assert len(reported) <= 3, reported
    assert all(UNKNOWN_FIELD in message for message in reported)
    assert api.pods(namespace, "typo") == []

    fixed = {"name": "agent", "command": agent_command("echo")}
    api.patch_spec("agentpools", namespace, "typo", {"template": {"spec": {"containers": [fixed]}}})
    wait_for(
        lambda: pool_status(api, namespace, "typo").get("readyReplicas") == 2,
        60,
        message="two Ready agents once the template is fixed",
    )
    assert degraded(api, namespace, "typo").get("reason") != "CreateFailed"


def ready_count(pods: list[dict[str, Any]]) -> int:
    return sum(
        1
        for p in pods
        for c in p["status"].get("conditions") or []
        if c["type"] == "Ready" and c["status"] == "True"
    )


def test_agents_that_never_turn_ready_hold_max_unready_pods(api: Api, namespace: str) -> None:
    """minSize 6, maxUnready 2, an agent that never serves its readiness probe: two pods, never
    more, at every look; raising maxUnready to 3 makes one more; a working template then fills
    the pool with at most three pods starting at any time."""
    stuck = pool_spec(minSize=6, maxUnready=2)
    stuck["template"]["spec"]["containers"][0]["command"] = [
        "python",
        "-c",
        "import time; time.sleep(3600)",
    ]
    api.create("agentpools", namespace, "stuck", stuck)
    bound = 2

    def unready_within_bound() -> list[dict[str, Any]]:
        pods = api.live_pods(namespace, "stuck")
        assert len(pods) - ready_count(pods) <= bound, [p["metadata"]["name"] for p in pods]
        return pods

    wait_for(lambda: len(unready_within_bound()) == 2, 30, message="two starting pods")
    bound = 3
    api.patch_spec("agentpools", namespace, "stuck", {"maxUnready": 3})
    wait_for(lambda: len(unready_within_bound()) == 3, 30, message="a third starting pod")

    fixed = {"name": "agent", "command": agent_command("echo")}
    api.patch_spec(
        "agentpools", namespace, "stuck", {"template": {"spec": {"containers": [fixed]}}}
    )
    wait_for(
        lambda: ready_count(unready_within_bound()) == 6,
        90,
        message="six Ready agents, at most three starting at a time",
    )
    wait_for(lambda: pool_status(api, namespace, "stuck").get("readyReplicas") == 6, 30)


def test_agents_not_ready_past_the_progress_deadline_are_named(api: Api, namespace: str) -> None:
    """progressDeadlineSeconds 3 and an agent that never turns Ready: within seconds of the
    deadline the pool is Degraded AgentsNotReady, naming the pod and the deadline."""
    stuck = pool_spec(minSize=1, progressDeadlineSeconds=3)
    stuck["template"]["spec"]["containers"][0]["command"] = [
        "python",
        "-c",
        "import time; time.sleep(3600)",
    ]
    api.create("agentpools", namespace, "late", stuck)
    pod = wait_for(lambda: api.live_pods(namespace, "late"), 30, message="the agent pod")[0]
    condition = wait_for(
        lambda: (c := degraded(api, namespace, "late")).get("reason") == "AgentsNotReady" and c,
        30,
        message="Degraded AgentsNotReady",
    )
    assert condition["status"] == "True"
    assert pod["metadata"]["name"] in condition["message"]
    assert "1 agent is not Ready past progressDeadlineSeconds (3s)" in condition["message"]
