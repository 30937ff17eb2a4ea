"""AgentPool on the local cluster, through the public surface: pools, leases, runs, pods, events.

Each test proves one promise of the AgentPool resource with the real operator (its own
process), the real local kubelet running the example agents, and the kubernetes client.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import time
import urllib.error
import urllib.request
from typing import Any

from operator_support import Api, agent_pids, pool_spec, ready
from pool_support import (
    bound_agent,
    lease,
    lease_phase,
    pool_status,
    retired_event,
)

from cluster import wait_for


def test_min_size_agents_become_ready_and_available(api: Api, namespace: str) -> None:
    """minSize 3 brings three agents up, all Ready and available, with Ready=True."""
    api.create("agentpools", namespace, "warm", pool_spec(minSize=3))
    status = wait_for(
        lambda: (
            (s := pool_status(api, namespace, "warm")).get("readyReplicas") == 3
            and s.get("available") == 3
            and s
        ),
        60,
        message="three ready agents",
    )
    assert status["replicas"] == 3
    assert status["state"] == "Ready"
    assert status["selector"] == "agentpool.dev/pool=warm"
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Ready"]["status"] == "True"
    assert len(api.live_pods(namespace, "warm")) == 3


def test_slow_agent_gets_no_work_before_its_start_up_ends(api: Api, namespace: str) -> None:
    """A run created with the pool waits for the slow start-up: no item meets a cold agent."""
    api.create(
        "agentpools",
        namespace,
        "slow",
        pool_spec("slow_start", env={"SLOW_START_SECONDS": "3", "WORK_SECONDS": "0"}, minSize=1),
    )
    items = [{"id": f"i{n}", "n": n} for n in range(4)]
    api.create(
        "poolruns",
        namespace,
        "early",
        {"poolRef": {"name": "slow"}, "source": {"items": items}, "itemId": "id", "cap": 2},
    )
    status = wait_for(
        lambda: (
            (s := api.status("poolruns", namespace, "early")).get("phase")
            in ("Succeeded", "Failed")
            and s
        ),
        90,
        message="run finished",
    )
    assert status.get("failures", {}) == {}
    assert status["succeeded"] == 4
    assert sorted(status["items"]) == ["i0", "i1", "i2", "i3"]


def test_overflow_stops_at_max_size_and_waiters_go_by_priority_then_arrival(
    api: Api, namespace: str
) -> None:
    """Leases beyond the idle agents grow the pool to maxSize and no further; the rest wait and
    are served by priority, then in arrival order; a checkout past its timeout is refused with
    the pool's numbers; the idle overflow goes after idleTimeoutSeconds."""
    api.create("agentpools", namespace, "p", pool_spec(minSize=1, maxSize=2, idleTimeoutSeconds=2))
    wait_for(lambda: pool_status(api, namespace, "p").get("readyReplicas") == 1, 60)
    lease(api, namespace, "a", "p")
    lease(api, namespace, "b", "p")
    first, second = bound_agent(api, namespace, "a"), bound_agent(api, namespace, "b", 60)
    assert first != second
    lease(api, namespace, "c", "p", checkoutTimeoutSeconds=120)
    wait_for(lambda: pool_status(api, namespace, "p").get("waiting") == 1, 30)
    lease(api, namespace, "d", "p", checkoutTimeoutSeconds=120, priority=5)
    lease(api, namespace, "e", "p", checkoutTimeoutSeconds=120)
    wait_for(lambda: pool_status(api, namespace, "p").get("waiting") == 3, 30)

    lease(api, namespace, "late", "p", checkoutTimeoutSeconds=1)
    failed = wait_for(
        lambda: (s := api.status("agentleases", namespace, "late")).get("phase") == "Failed" and s,
        30,
    )
    assert failed["reason"] == "CheckoutTimeout"
    assert 'pool "p"' in failed["message"]
    assert "minSize 1, maxSize 2" in failed["message"]
    assert "ready 2" in failed["message"]
    assert "waiting" in failed["message"]
    lease(api, namespace, "nowait", "p", wait=False)
    refused = wait_for(
        lambda: (
            (s := api.status("agentleases", namespace, "nowait")).get("phase") == "Failed" and s
        ),
        30,
    )
    assert refused["reason"] == "PoolFull"
    assert len(api.live_pods(namespace, "p")) == 2

    api.delete("agentleases", namespace, "a")
    assert bound_agent(api, namespace, "d") == first  # priority 5 before earlier arrivals
    assert lease_phase(api, namespace, "c") == "Pending"
    api.delete("agentleases", namespace, "b")
    assert bound_agent(api, namespace, "c") == second  # then first come, first served
    assert lease_phase(api, namespace, "e") == "Pending"
    assert len(api.live_pods(namespace, "p")) == 2

    for name in ("c", "d", "e"):
        api.delete("agentleases", namespace, name)
    wait_for(lambda: len(api.live_pods(namespace, "p")) == 1, 30, message="overflow removed")
    # Events are posted in the background: the scale-down's follows shortly.
    wait_for(lambda: "ScaledDown" in api.event_reasons(namespace), 10, message="ScaledDown")


def checkout_order(api: Api, namespace: str, strategy: str) -> tuple[str, str, str]:
    """Bind two leases, release them in order, and return (first, second, the next one handed)."""
    pool = strategy.lower()
    api.create("agentpools", namespace, pool, pool_spec(minSize=2, strategy=strategy))
    wait_for(lambda: pool_status(api, namespace, pool).get("available") == 2, 60)
    lease(api, namespace, f"{pool}-1", pool)
    lease(api, namespace, f"{pool}-2", pool)
    first, second = (
        bound_agent(api, namespace, f"{pool}-1"),
        bound_agent(api, namespace, f"{pool}-2"),
    )
    api.delete("agentleases", namespace, f"{pool}-1")
    wait_for(lambda: pool_status(api, namespace, pool).get("available") == 1, 30)
    api.delete("agentleases", namespace, f"{pool}-2")
    wait_for(lambda: pool_status(api, namespace, pool).get("available") == 2, 30)
    lease(api, namespace, f"{pool}-3", pool)
    return first, second, bound_agent(api, namespace, f"{pool}-3")


def test_lifo_hands_out_the_most_recently_returned_agent(api: Api, namespace: str) -> None:
    """LIFO: after returning agent 1 then agent 2, the next checkout gets agent 2."""
    first, second, handed = checkout_order(api, namespace, "LIFO")
    assert handed == second != first


def test_fifo_hands_out_the_longest_idle_agent(api: Api, namespace: str) -> None:
    """FIFO: after returning agent 1 then agent 2, the next checkout gets agent 1."""
    first, second, handed = checkout_order(api, namespace, "FIFO")
    assert handed == first != second


def test_min_idle_keeps_idle_agents_on_top_of_busy_ones(api: Api, namespace: str) -> None:
    """With minIdle 1, a busy agent makes the pool start another, so a burst finds one warm."""
    api.create("agentpools", namespace, "burst", pool_spec(minSize=1, maxSize=3, minIdle=1))
    wait_for(lambda: pool_status(api, namespace, "burst").get("available") == 1, 60)
    assert pool_status(api, namespace, "burst")["replicas"] == 1
    lease(api, namespace, "one", "burst")
    bound_agent(api, namespace, "one")
    status = wait_for(
        lambda: (
            (s := pool_status(api, namespace, "burst")).get("available") == 1
            and s.get("busy") == 1
            and s.get("readyReplicas") == 2
            and s
        ),
        60,
    )
    assert status["replicas"] == 2


def test_scale_subresource_and_kubectl_views(api: Api, namespace: str, kubectl_op: Any) -> None:
    """kubectl shows the printer columns, `kubectl scale` changes minSize and the pool follows,
    and `kubectl describe` shows the pool's Events."""
    api.create("agentpools", namespace, "viewed", pool_spec(minSize=1, maxSize=3))
    wait_for(lambda: pool_status(api, namespace, "viewed").get("readyReplicas") == 1, 60)
    table = kubectl_op("get", "agentpools", "-n", namespace).stdout
    header = table.splitlines()[0].split()
    assert header == ["NAME", "MIN", "MAX", "READY", "BUSY", "STATE", "AGE"]
    row = table.splitlines()[1].split()
    assert row[:6] == ["viewed", "1", "3", "1", "0", "Ready"]
    kubectl_op("scale", "agentpool", "viewed", "-n", namespace, "--replicas=3")
    assert api.get("agentpools", namespace, "viewed")["spec"]["minSize"] == 3
    wait_for(lambda: pool_status(api, namespace, "viewed").get("readyReplicas") == 3, 60)
    described = kubectl_op("describe", "agentpool", "viewed", "-n", namespace).stdout
    assert "ScaledUp" in described


def test_max_column_shows_min_size_when_max_size_is_unset(
    api: Api, namespace: str, kubectl_op: Any
) -> None:
    """A pool without maxSize runs at most minSize agents, and `kubectl get` says so in MAX
    instead of leaving it blank."""
    api.create("agentpools", namespace, "nomax", pool_spec(minSize=2))
    wait_for(lambda: pool_status(api, namespace, "nomax").get("readyReplicas") == 2, 60)

    def cells() -> dict[str, str]:
        header, row = kubectl_op("get", "agentpools", "-n", namespace).stdout.splitlines()[:2]
        # Cells sit under their headers; a blank cell leaves only spaces there.
        starts = [header.index(name) for name in header.split()]
        ends = [*starts[1:], None]
        return {
            name: row[start:end].strip()
            for name, start, end in zip(header.split(), starts, ends, strict=True)
        }

    shown = wait_for(lambda: (c := cells())["MAX"] and c, 10, message="MAX column filled")
    assert (shown["NAME"], shown["MIN"], shown["MAX"]) == ("nomax", "2", "2")


def test_deleting_a_pool_ends_its_daemon_cleanly_with_kopf_events(
    api: Api, namespace: str, operator_cluster: Any
) -> None:
    """Deleting a pool stops its loop without kopf cancelling it (no "cancelled, will
    escalate" warning), and the pool's Events name agentpool as the component reporting them."""
    api.create("agentpools", namespace, "bye", pool_spec(minSize=1))
    wait_for(lambda: pool_status(api, namespace, "bye").get("readyReplicas") == 1, 60)
    cancelled = "Daemon 'pool_loop' is cancelled"
    before = operator_cluster.operator.log().count(cancelled)
    api.delete("agentpools", namespace, "bye")
    wait_for(lambda: not api.exists("agentpools", namespace, "bye"), 60, message="pool gone")
    assert operator_cluster.operator.log().count(cancelled) == before
    scaled = wait_for(
        lambda: next((e for e in api.events(namespace) if e.get("reason") == "ScaledUp"), None),
        10,
        message="ScaledUp event",
    )
    assert scaled["source"]["component"] == "agentpool"
    assert scaled["reportingComponent"] == "agentpool"


def test_agents_demand_the_token_and_the_token_is_never_shown(
    api: Api, namespace: str, operator_cluster: Any
) -> None:
    """A request without the pool's token gets 401; the token is in no status, event or log."""
    api.create("agentpools", namespace, "secret", pool_spec(minSize=1))
    wait_for(lambda: pool_status(api, namespace, "secret").get("available") == 1, 60)
    lease(api, namespace, "talk", "secret")
    bound_agent(api, namespace, "talk")
    status = api.status("agentleases", namespace, "talk")
    ref = status["tokenSecretRef"]
    secret = api.core.read_namespaced_secret(ref["name"], namespace)
    token = base64.b64decode(secret.data[ref["key"]]).decode()
    endpoint = status["endpoint"]

    def call(headers: dict[str, str]) -> int:
        request = urllib.request.Request(f"{endpoint}/status", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return int(response.status)
        except urllib.error.HTTPError as error:
            return int(error.code)

    assert call({}) == 401
    assert call({"Authorization": "Bearer wrong"}) == 401
    assert call({"Authorization": f"Bearer {token}"}) == 200

    seen = json.dumps(
        [
            api.get("agentpools", namespace, "secret"),
            api.get("agentleases", namespace, "talk"),
            api.events(namespace),
        ]
    )
    assert token not in seen
    assert token not in operator_cluster.operator.log()
    for pod in api.pods(namespace, "secret"):
        log = api.core.read_namespaced_pod_log(pod["metadata"]["name"], namespace)
        assert token not in log


def test_deleting_a_pool_removes_its_agents(api: Api, namespace: str) -> None:
    """Deleting the pool removes its pods and its token Secret."""
    api.create("agentpools", namespace, "gone", pool_spec(minSize=2))
    wait_for(lambda: pool_status(api, namespace, "gone").get("readyReplicas") == 2, 60)
    api.delete("agentpools", namespace, "gone")
    wait_for(lambda: not api.pods(namespace, "gone"), 60, message="pods removed")
    wait_for(lambda: not api.exists("agentpools", namespace, "gone"), 30)
    secrets = [s.metadata.name for s in api.core.list_namespaced_secret(namespace).items]
    assert "gone-agent-token" not in secrets


def test_agents_that_cannot_start_degrade_the_pool_without_churning(
    api: Api, namespace: str
) -> None:
    """A pool whose pods cannot run (no command for the local kubelet) reports Degraded with the
    reason, and backs off, doubling from a second, instead of creating pod after pod."""
    api.create("agentpools", namespace, "broken", {"image": "agentpool:0.1.0", "minSize": 1})

    def degraded() -> dict[str, Any] | None:
        for cond in pool_status(api, namespace, "broken").get("conditions", []):
            if cond["type"] == "Degraded" and cond["status"] == "True":
                return dict(cond)
        return None

    first = wait_for(degraded, 30)
    started = time.monotonic()
    assert first["reason"] == "NoLocalCommand"
    assert "command" in first["message"]
    wait_for(
        lambda: (c := degraded()) is not None and "(4 agents failed" in c["message"],
        60,
        interval=0.1,
        message="four failed agents",
    )
    # Without back-off the next three replacements would fail within a second; with it they
    # wait 1 + 2 + 4 seconds.
    assert time.monotonic() - started >= 6


def test_an_agent_that_stops_passing_readiness_degrades_the_pool(api: Api, namespace: str) -> None:
    """A frozen agent fails its readiness probe: it leaves the pool, is replaced, and the pool
    reports Degraded with reason ReadinessFailing naming it."""
    api.create("agentpools", namespace, "frozen", pool_spec(minSize=1))
    pod = wait_for(
        lambda: next((p for p in api.live_pods(namespace, "frozen") if ready(p)), None), 60
    )
    for pid in agent_pids(pod["status"]["podIP"]):
        os.kill(pid, signal.SIGSTOP)
    degraded = wait_for(
        lambda: next(
            (
                c
                for c in pool_status(api, namespace, "frozen").get("conditions", [])
                if c["type"] == "Degraded" and c["status"] == "True"
            ),
            None,
        ),
        30,
    )
    assert degraded["reason"] == "ReadinessFailing"
    assert pod["metadata"]["name"] in degraded["message"]
    retired_event(api, namespace, pod["metadata"]["name"], "Unready")
