"""What an AgentPool's status and Events tell a user: its state, its Ready count, its sizes.

Each test drives a pool through the public surface (leases hold agents, as a client would) and
reads back the status and Events that `kubectl get agentpools` and `kubectl describe` show.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from operator_support import Api, kill_agent, pool_spec
from pool_support import bound_agent, lease, pool_status

from cluster import wait_for


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    found = next((c for c in status.get("conditions", []) if c["type"] == kind), None)
    assert found is not None, f"no {kind} condition in {status}"
    return dict(found)


def state_reaches(api: Api, namespace: str, pool: str, state: str, **counts: int) -> dict[str, Any]:
    """The pool's status once its state is `state` and the given counts hold."""
    return wait_for(
        lambda: (
            (s := pool_status(api, namespace, pool)).get("state") == state
            and all(s.get(key) == value for key, value in counts.items())
            and s
        ),
        60,
        message=f"pool {pool} {state} with {counts}",
    )


def event_messages(api: Api, namespace: str, reason: str) -> list[str]:
    return [str(e.get("message")) for e in api.events(namespace) if e.get("reason") == reason]


def test_state_and_ready_say_what_a_checkout_finds(api: Api, namespace: str) -> None:
    """Ready while an agent is idle, Overflow once every agent is busy and the pool may grow,
    Full at maxSize with none idle, and Ready again with idle overflow agents; the Ready
    condition counts ready and idle agents, never more ready than the pool has; the ScaledUp
    Events say from how many to how many."""
    api.create(
        "agentpools", namespace, "p", pool_spec(minSize=1, maxSize=2, idleTimeoutSeconds=600)
    )
    status = state_reaches(api, namespace, "p", "Ready", available=1)
    assert condition(status, "Ready")["message"] == "1 of 1 agent ready, 1 idle (minSize 1)"

    lease(api, namespace, "a", "p")
    bound_agent(api, namespace, "a")
    state_reaches(api, namespace, "p", "Overflow", busy=1, available=0)

    lease(api, namespace, "b", "p")
    bound_agent(api, namespace, "b")
    status = state_reaches(api, namespace, "p", "Full", busy=2, available=0)
    assert condition(status, "Ready")["message"] == "2 of 2 agents ready, 0 idle (minSize 1)"

    api.delete("agentleases", namespace, "a")
    api.delete("agentleases", namespace, "b")
    status = state_reaches(api, namespace, "p", "Ready", available=2)
    ready = condition(status, "Ready")
    assert (ready["status"], ready["message"]) == (
        "True",
        "2 of 2 agents ready, 2 idle (minSize 1)",
    )
    scaled = wait_for(
        lambda: len(m := event_messages(api, namespace, "ScaledUp")) >= 2 and m,
        10,
        message="two ScaledUp Events",
    )
    assert sorted(scaled) == [
        "Scaled up from 0 to 1 agent",
        "Scaled up from 1 to 2 agents for 1 waiting checkout",
    ]


def test_a_pool_whose_agents_are_not_ready_is_starting(api: Api, namespace: str) -> None:
    """Agents that never pass their readiness probe leave the pool Starting, not Full, and
    Ready False counting none of the two it waits for."""
    api.create(
        "agentpools",
        namespace,
        "cold",
        pool_spec(minSize=2, readinessProbe={"httpGet": {"path": "/never"}}),
    )
    status = state_reaches(api, namespace, "cold", "Starting", replicas=2)
    ready = condition(status, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "AgentsStarting")
    assert ready["message"] == "0 of 2 agents ready, 0 idle (minSize 2)"


def test_a_pool_at_min_size_zero_scales_to_zero_and_back(api: Api, namespace: str) -> None:
    """minSize 0 and no demand: ScaledToZero, not Overflow. A lease starts an overflow agent;
    once it is returned and idle past its timeout the pool says it scaled down to none."""
    api.create("agentpools", namespace, "z", pool_spec(minSize=0, maxSize=2, idleTimeoutSeconds=1))
    status = state_reaches(api, namespace, "z", "ScaledToZero", replicas=0)
    assert condition(status, "Ready")["message"] == "0 of 0 agents ready, 0 idle (minSize 0)"
    lease(api, namespace, "one", "z")
    bound_agent(api, namespace, "one")
    state_reaches(api, namespace, "z", "Overflow", busy=1)
    api.delete("agentleases", namespace, "one")
    state_reaches(api, namespace, "z", "ScaledToZero", replicas=0)
    down = wait_for(
        lambda: event_messages(api, namespace, "ScaledDown"), 10, message="ScaledDown Event"
    )
    assert down == ["Scaled down from 1 to 0 agents"]


CRASH_AT_START_UP = (
    "print('loading the model', flush=True)\nraise SystemExit('no model at /models/agent.bin')"
)


def crashing_pool(api: Api, namespace: str, name: str) -> None:
    spec = pool_spec(minSize=1)
    spec["template"]["spec"]["containers"][0]["command"] = ["python", "-c", CRASH_AT_START_UP]
    api.create("agentpools", namespace, name, spec)


def start_failures(api: Api, namespace: str, pool: str, count: int) -> dict[str, Any]:
    """The pool's Degraded condition once `count` agents failed before turning Ready."""

    def degraded() -> dict[str, Any] | None:
        status = pool_status(api, namespace, pool)
        found = next((c for c in status.get("conditions", []) if c["type"] == "Degraded"), None)
        if found and found["status"] == "True" and f"({count} agents failed" in found["message"]:
            return dict(found)
        return None

    return wait_for(degraded, 60, message=f"Degraded after {count} failed agents")


def test_a_crash_at_start_up_degrades_the_pool_with_its_cause(
    api: Api, namespace: str, kubectl_op: Any
) -> None:
    """An agent that exits while it starts: Degraded says CrashLoopBackOff, names the pods that
    failed and ends with the last line the agent wrote, its exit's cause. The pods it names are
    kept out of the pool's count, so `kubectl logs POD` and `kubectl describe pod POD`, as the
    troubleshooting page advises, show the agent's output and its termination message."""
    crashing_pool(api, namespace, "crash")
    degraded = start_failures(api, namespace, "crash", 2)
    assert degraded["reason"] == "CrashLoopBackOff"
    pattern = (
        r"agent (crash-[a-z0-9]+) exited with code 1: no model at /models/agent\.bin"
        r" \(2 agents failed before turning Ready: (crash-[a-z0-9]+), (crash-[a-z0-9]+)\)"
    )
    match = re.fullmatch(pattern, degraded["message"])
    assert match is not None, degraded["message"]
    last, first, second = match.groups()
    assert last == second != first
    assert pool_status(api, namespace, "crash").get("replicas", 0) <= 1
    for pod in (first, second):
        logged = kubectl_op("logs", pod, "-n", namespace).stdout
        assert logged == "loading the model\nno model at /models/agent.bin\n"
        described = kubectl_op("describe", "pod", pod, "-n", namespace).stdout
        assert "no model at /models/agent.bin" in described
        assert re.search(r"Exit Code:\s+1\b", described), described


def test_an_agent_lost_mid_item_leaves_its_pod_to_inspect(
    api: Api, namespace: str, kubectl_op: Any
) -> None:
    """An agent killed while a lease holds it: the lease fails AgentLost naming the pod, the
    pool replaces it, and the troubleshooting page's `kubectl logs POD` and `kubectl describe pod
    POD` show what the agent wrote and how it ended (exit code 137, killed)."""
    api.create("agentpools", namespace, "lost", pool_spec(minSize=1))
    state_reaches(api, namespace, "lost", "Ready", available=1)
    lease(api, namespace, "holder", "lost")
    agent = bound_agent(api, namespace, "holder")
    kill_agent(next(p for p in api.pods(namespace, "lost") if p["metadata"]["name"] == agent))
    failed = wait_for(
        lambda: (
            (s := api.status("agentleases", namespace, "holder")).get("phase") == "Failed" and s
        ),
        30,
        message="lease failed",
    )
    assert failed["reason"] == "AgentLost"
    assert agent in failed["message"]
    state_reaches(api, namespace, "lost", "Ready", available=1, replicas=1)
    assert "ready after" in kubectl_op("logs", agent, "-n", namespace).stdout
    described = kubectl_op("describe", "pod", agent, "-n", namespace).stdout
    assert re.search(r"Exit Code:\s+137\b", described), described


# A plain HTTP server on port 8079 of the agent's address, while the pool's probe asks 8080.
WRONG_PORT = [
    "python",
    "-c",
    "import http.server, os; http.server.HTTPServer((os.environ.get('AGENT_HOST', '0.0.0.0'),"
    " 8079), http.server.SimpleHTTPRequestHandler).serve_forever()",
]


def moment(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def running_pod(api: Api, namespace: str) -> dict[str, Any] | None:
    """The pool's one pod once its container runs: its name and when it started."""
    for pod in api.core.list_namespaced_pod(namespace).items:
        for status in pod.status.container_statuses or []:
            if status.state.running is not None:
                return {"name": pod.metadata.name, "started": status.state.running.started_at}
    return None


def test_an_agent_on_the_wrong_port_says_why_it_is_not_ready(api: Api, namespace: str) -> None:
    """A pool whose agent listens on another port than its probe asks shows an Unhealthy Event
    with the probe's error within 10 s of the pod starting, and a Degraded condition naming the
    agent and that error within 90 s, where before it said nothing until progressDeadlineSeconds
    (600 s) had passed. Its Progressing condition speaks of a new pool, not of a rollout."""
    template = {"spec": {"containers": [{"name": "agent", "command": WRONG_PORT}]}}
    api.create("agentpools", namespace, "wrong", {"image": "agentpool:0.1.0", "template": template})
    pod = wait_for(lambda: running_pod(api, namespace), 60, message="the agent's container runs")
    started = pod["started"].timestamp()

    def unhealthy() -> dict[str, Any] | None:
        return next(
            (
                e
                for e in api.events(namespace)
                if e.get("reason") == "Unhealthy"
                and (e.get("involvedObject") or {}).get("name") == pod["name"]
            ),
            None,
        )

    event = wait_for(unhealthy, 30, message="an Unhealthy Event on the agent's pod")
    assert moment(event["firstTimestamp"]) - started <= 10, (event, started)
    assert event["type"] == "Warning"
    assert event["message"].startswith("Readiness probe failed: "), event
    assert ":8080/healthz" in event["message"], event
    assert "connection refused" in event["message"], event

    def degraded() -> dict[str, Any] | None:
        # The pod may fail its probe before the operator has first written the pool's status.
        conditions = pool_status(api, namespace, "wrong").get("conditions", [])
        found = next((c for c in conditions if c["type"] == "Degraded"), None)
        return found if found is not None and found["status"] == "True" else None

    said = wait_for(degraded, 120, message="the pool Degraded")
    # When the operator said so, by the condition's own stamp, not when this poll saw it.
    assert moment(said["lastTransitionTime"]) - started <= 90, (said, started)
    assert said["reason"] == "ReadinessFailing", said
    assert pod["name"] in said["message"], said
    assert "connection refused" in said["message"], said
    assert ":8080/healthz" in said["message"], said
    progressing = condition(pool_status(api, namespace, "wrong"), "Progressing")
    assert progressing["message"].startswith("new pool"), progressing
    assert "outdated" not in progressing["message"], progressing
