"""AgentPool agents' lives on the local cluster: replacement, recycling, quarantine, restarts.

An agent that dies is replaced; one that has served maxUses items, lived maxLifetimeSeconds,
failed items in a row or timed out is retired and replaced, never while it is held; and a
restarted operator keeps what was held, held.
"""

from __future__ import annotations

from typing import Any

from operator_support import Api, kill_agent, pool_spec, ready
from pool_support import (
    bound_agent,
    lease,
    lease_phase,
    pool_status,
    retired_event,
    run_to_end,
)

from cluster import wait_for


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


def test_max_uses_retires_an_agent_only_once_it_is_returned(api: Api, namespace: str) -> None:
    """maxUses 2: the agent serves two checkouts, is never retired while held, and is replaced
    once the second holder lets go."""
    api.create("agentpools", namespace, "worn", pool_spec(minSize=1, maxUses=2))
    wait_for(lambda: pool_status(api, namespace, "worn").get("available") == 1, 60)
    lease(api, namespace, "u1", "worn")
    agent = bound_agent(api, namespace, "u1")
    api.delete("agentleases", namespace, "u1")
    wait_for(lambda: pool_status(api, namespace, "worn").get("available") == 1, 30)
    lease(api, namespace, "u2", "worn")
    assert bound_agent(api, namespace, "u2") == agent
    assert "AgentRetired" not in api.event_reasons(namespace)
    assert [p["metadata"]["name"] for p in api.live_pods(namespace, "worn")] == [agent]
    api.delete("agentleases", namespace, "u2")
    wait_for(
        lambda: agent not in [p["metadata"]["name"] for p in api.live_pods(namespace, "worn")], 30
    )
    retired_event(api, namespace, agent, "MaxUses")
    lease(api, namespace, "u3", "worn")
    assert bound_agent(api, namespace, "u3", 60) != agent


def test_max_lifetime_waits_for_the_holder(api: Api, namespace: str) -> None:
    """maxLifetimeSeconds retires an aged agent, but not while a lease still holds it.

    The lifetime counts from the pod's creation, so it leaves the agent a few seconds to start
    and be seen available even on a loaded machine; the lease outlasts it."""
    api.create("agentpools", namespace, "aged", pool_spec(minSize=1, maxLifetimeSeconds=6))
    wait_for(lambda: pool_status(api, namespace, "aged").get("available") == 1, 60)
    lease(api, namespace, "hold", "aged", ttlSeconds=8)
    agent = bound_agent(api, namespace, "hold")
    wait_for(lambda: lease_phase(api, namespace, "hold") == "Expired", 30)
    # The agent outlived its lifetime while held; it went only after the lease gave it back.
    held_until = api.status("agentleases", namespace, "hold")
    assert agent in held_until["message"]
    wait_for(
        lambda: agent not in [p["metadata"]["name"] for p in api.live_pods(namespace, "aged")], 30
    )
    retired_event(api, namespace, agent, "MaxLifetime")


def test_operator_restart_keeps_busy_agents_busy(
    api: Api, namespace: str, operator_cluster: Any
) -> None:
    """Restarting the operator while both agents are held: the new one counts them busy, and a
    new checkout waits instead of getting an agent someone else holds."""
    api.create("agentpools", namespace, "steady", pool_spec(minSize=2))
    wait_for(lambda: pool_status(api, namespace, "steady").get("available") == 2, 60)
    lease(api, namespace, "h1", "steady", ttlSeconds=600)
    lease(api, namespace, "h2", "steady", ttlSeconds=600)
    held = {bound_agent(api, namespace, "h1"), bound_agent(api, namespace, "h2")}
    operator_cluster.operator.kill()
    operator_cluster.operator.start()
    lease(api, namespace, "h3", "steady", checkoutTimeoutSeconds=120)
    status = wait_for(
        lambda: (s := pool_status(api, namespace, "steady")).get("waiting") == 1 and s, 60
    )
    assert status["busy"] == 2
    assert status["available"] == 0
    assert lease_phase(api, namespace, "h3") == "Pending"
    api.delete("agentleases", namespace, "h1")
    assert bound_agent(api, namespace, "h3") in held
    assert api.status("agentleases", namespace, "h2")["agent"] in held
    assert bound_agent(api, namespace, "h3") != api.status("agentleases", namespace, "h2")["agent"]


def test_max_uses_counts_the_items_an_agent_served_before_an_operator_restart(
    api: Api, namespace: str, operator_cluster: Any
) -> None:
    """maxUses 3: an agent serves two items, the operator is killed and started again, and the
    agent's third item (its own count, from GET /status) retires it as if nothing happened."""
    api.create("agentpools", namespace, "counted", pool_spec(minSize=1, maxUses=3))
    wait_for(lambda: pool_status(api, namespace, "counted").get("available") == 1, 60)
    [agent] = [p["metadata"]["name"] for p in api.live_pods(namespace, "counted")]
    spec = {"poolRef": {"name": "counted"}, "checkoutTimeoutSeconds": 60}
    first = run_to_end(api, namespace, "before", {**spec, "source": {"items": [1, 2]}})
    assert first["succeeded"] == 2
    operator_cluster.operator.kill()
    operator_cluster.operator.start()
    wait_for(lambda: pool_status(api, namespace, "counted").get("available") == 1, 60)
    after = run_to_end(api, namespace, "after", {**spec, "source": {"items": [3]}})
    assert after["succeeded"] == 1
    retired_event(api, namespace, agent, "MaxUses")


def test_a_killed_busy_agent_fails_its_holder_and_is_replaced(api: Api, namespace: str) -> None:
    """Killing the agent a lease holds fails the lease with AgentLost; the pod is replaced."""
    api.create("agentpools", namespace, "fragile", pool_spec(minSize=1))
    wait_for(lambda: pool_status(api, namespace, "fragile").get("available") == 1, 60)
    lease(api, namespace, "holder", "fragile")
    agent = bound_agent(api, namespace, "holder")
    pod = next(p for p in api.pods(namespace, "fragile") if p["metadata"]["name"] == agent)
    kill_agent(pod)
    failed = wait_for(
        lambda: (
            (s := api.status("agentleases", namespace, "holder")).get("phase") == "Failed" and s
        ),
        30,
    )
    assert failed["reason"] == "AgentLost"
    assert agent in failed["message"]
    wait_for(
        lambda: [p for p in api.live_pods(namespace, "fragile") if p["metadata"]["name"] != agent],
        30,
        message="replacement pod",
    )


def test_a_template_change_replaces_idle_agents_but_never_a_busy_one(
    api: Api, namespace: str
) -> None:
    """A new template replaces agents as they fall idle: the held one stays until released."""
    api.create("agentpools", namespace, "rolling", pool_spec(minSize=2))
    wait_for(lambda: pool_status(api, namespace, "rolling").get("available") == 2, 60)
    lease(api, namespace, "busy", "rolling")
    held = bound_agent(api, namespace, "busy")
    old = {p["metadata"]["name"] for p in api.live_pods(namespace, "rolling")}
    api.patch_spec("agentpools", namespace, "rolling", pool_spec(env={"VERSION": "2"}, minSize=2))
    (idle_old,) = old - {held}
    wait_for(
        lambda: (
            idle_old not in {p["metadata"]["name"] for p in api.live_pods(namespace, "rolling")}
        ),
        30,
        message="idle outdated agent replaced",
    )
    assert held in {p["metadata"]["name"] for p in api.live_pods(namespace, "rolling")}
    api.delete("agentleases", namespace, "busy")
    wait_for(
        lambda: (
            not old & {p["metadata"]["name"] for p in api.live_pods(namespace, "rolling")}
            and pool_status(api, namespace, "rolling").get("readyReplicas") == 2
        ),
        60,
        message="every agent on the new template",
    )
    retired_event(api, namespace, idle_old, "Outdated")


def test_items_that_fail_everywhere_do_not_churn_the_pool(api: Api, namespace: str) -> None:
    """200 items that every agent fails (bad input, not bad agents) are served by the pool's own
    two agents: no agent is quarantined, no pod is created beyond the pool's size, and no
    AgentRetired Event is posted."""
    api.create("agentpools", namespace, "bad", pool_spec("flaky", minSize=2))
    wait_for(lambda: pool_status(api, namespace, "bad").get("available") == 2, 60)
    first = {p["metadata"]["name"] for p in api.live_pods(namespace, "bad")}
    items = [{"id": f"bad{n}", "fail": True} for n in range(200)]
    status = run_to_end(
        api,
        namespace,
        "bad",
        {
            "poolRef": {"name": "bad"},
            "source": {"items": items},
            "itemId": "id",
            "failures": "Report",
            "cap": 2,
        },
    )
    assert status["failed"] == 200
    assert {f["agent"] for f in status["failures"].values()} <= first
    assert {p["metadata"]["name"] for p in api.pods(namespace, "bad")} == first
    assert "AgentRetired" not in api.event_reasons(namespace)


def test_an_agent_failing_where_others_succeed_is_quarantined(api: Api, namespace: str) -> None:
    """quarantineAfterFailures 2, three agents taking turns (FIFO): the one agent that fails the
    items the others serve is retired after its second failure, and the run goes on without it."""
    api.create(
        "agentpools",
        namespace,
        "q",
        pool_spec("flaky", minSize=3, strategy="FIFO", quarantineAfterFailures=2),
    )
    wait_for(lambda: pool_status(api, namespace, "q").get("available") == 3, 60)
    broken = sorted(p["metadata"]["name"] for p in api.live_pods(namespace, "q"))[0]
    items = [{"id": f"i{n}", "failOn": broken} for n in range(12)]
    status = run_to_end(
        api,
        namespace,
        "q",
        {
            "poolRef": {"name": "q"},
            "source": {"items": items},
            "itemId": "id",
            "failures": "Report",
            "checkoutTimeoutSeconds": 60,
        },
    )
    assert [f["agent"] for f in status["failures"].values()] == [broken, broken]
    assert status["succeeded"] == 10
    retired_event(api, namespace, broken, "Quarantined")


def test_a_call_that_times_out_retires_its_agent(api: Api, namespace: str) -> None:
    """An agent whose call timed out is in an unknown state: the item fails with CallTimeout and
    the agent is retired, never reused."""
    api.create("agentpools", namespace, "slowcall", pool_spec("flaky", minSize=1))
    wait_for(lambda: pool_status(api, namespace, "slowcall").get("available") == 1, 60)
    status = run_to_end(
        api,
        namespace,
        "t",
        {
            "poolRef": {"name": "slowcall"},
            "source": {"items": [{"id": "stuck", "sleepSeconds": 30}, {"id": "fine"}]},
            "itemId": "id",
            "failures": "Report",
            "callTimeoutSeconds": 1,
            "checkoutTimeoutSeconds": 60,
        },
    )
    failure = status["failures"]["stuck"]
    assert failure["reason"] == "CallTimeout"
    assert "fine" in status["items"]
    retired_event(api, namespace, failure["agent"], "CallTimedOut")
    assert failure["agent"] not in {
        p["metadata"]["name"] for p in api.live_pods(namespace, "slowcall")
    }
