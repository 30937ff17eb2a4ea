"""AgentPool on the local cluster, through the public surface: pools, leases, runs, pods, events.

Each test proves one promise of DESIGN.md's AgentPool section with the real operator (its own
process), the real local kubelet running the example agents, and the kubernetes client.
"""

from __future__ import annotations

from typing import Any

from operator_support import Api, kill_agent, pool_spec, ready

from cluster import wait_for


def pool_status(api: Api, namespace: str, name: str) -> dict[str, Any]:
    return api.status("agentpools", namespace, name)


def lease(api: Api, namespace: str, name: str, pool: str, **spec: Any) -> None:
    api.create("agentleases", namespace, name, {"poolRef": {"name": pool}, **spec})


def lease_phase(api: Api, namespace: str, name: str) -> str | None:
    return api.status("agentleases", namespace, name).get("phase")


def bound_agent(api: Api, namespace: str, name: str, timeout: float = 30) -> str:
    status = wait_for(
        lambda: (s := api.status("agentleases", namespace, name)).get("phase") == "Bound" and s,
        timeout,
        message=f"lease {name} bound",
    )
    return str(status["agent"])


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
    assert "ScaledDown" in api.event_reasons(namespace)


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


def test_a_killed_idle_agent_is_replaced_within_two_seconds(api: Api, namespace: str) -> None:
    """Killing an idle agent's process fails its pod; a replacement pod follows within 2 s."""
    api.create("agentpools", namespace, "heal", pool_spec(minSize=1))
    pod = wait_for(
        lambda: next((p for p in api.live_pods(namespace, "heal") if ready(p)), None), 60
    )
    kill_agent(pod)
    name = pod["metadata"]["name"]

    def failed() -> bool:
        for p in api.pods(namespace, "heal"):
            if p["metadata"]["name"] == name:
                return bool(p["status"].get("phase") == "Failed")
        return True  # already gone: it failed and was deleted

    wait_for(failed, 30, interval=0.02, message="pod failed")
    replacement = wait_for(
        lambda: [p for p in api.live_pods(namespace, "heal") if p["metadata"]["name"] != name],
        2.0,
        interval=0.02,
        message="replacement pod created",
    )
    assert len(replacement) == 1
    wait_for(lambda: pool_status(api, namespace, "heal").get("readyReplicas") == 1, 60)
