"""Replicas that share the pools (``agentpool run --share NAME``): each pool is worked on by one
live replica, named in its ``agentpool.dev/replica`` label, and a replica that crashes, stops or
joins moves only its own share of the pools, their runs and their leases, losing nothing.

The replicas are named (their ``POD_ID``), and the pools named so that the placement puts each
where the test needs it. On the local cluster they run on one of their own; on a real one, beside
the package's operator, serving the test's own namespaces as a group of their own.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import time
from pathlib import Path
from typing import Any

import kubernetes
from gateway_support import Gateway, caller_token
from operator_support import Api, Replica, ReplicaCluster, pool_spec
from run_support import finished_run, invocations, run_status, start_run

from agentpool.pool.placement import choose

REPLICA = "agentpool.dev/replica"
ITEMS = 100


def wait_for(predicate: Any, message: str, timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"waited {timeout:g}s for {message}")


def pool_named(namespace: str, prefix: str, wanted: Any) -> str:
    """The first pool name of ``prefix`` that ``wanted`` takes: ``wanted(at)``, where ``at``
    tells which replica of a set a pool of that name goes to."""
    for index in itertools.count():
        name = f"{prefix}{index}"
        if wanted(lambda members, name=name: choose((namespace, name), members)):
            return name
    raise AssertionError("unreachable")


def owner(api: Api, namespace: str, pool: str) -> str | None:
    labels = api.get("agentpools", namespace, pool)["metadata"].get("labels") or {}
    return labels.get(REPLICA)


def served(api: Api, namespace: str, pools: dict[str, str]) -> bool:
    """Whether each pool is labelled with the replica given and has its agent Ready."""
    for pool, replica in pools.items():
        body = api.get("agentpools", namespace, pool)
        ready = (body.get("status") or {}).get("readyReplicas") == 1
        if (body["metadata"].get("labels") or {}).get(REPLICA) != replica or not ready:
            return False
    return True


def make_pools(api: Api, namespace: str, pools: list[str], record: Path) -> None:
    env = {"SLOW_START_SECONDS": "0", "WORK_SECONDS": "0.05", "INVOCATIONS_FILE": str(record)}
    for pool in pools:
        api.create("agentpools", namespace, pool, pool_spec("slow_start", env=env, minSize=1))


def bind(api: Api, namespace: str, pool: str) -> str:
    """A lease of ``pool``, Bound; its agent."""
    api.create("agentleases", namespace, "held", {"poolRef": {"name": pool}, "ttlSeconds": 600})
    wait_for(
        lambda: api.status("agentleases", namespace, "held").get("phase") == "Bound",
        "the lease Bound",
    )
    return str(api.status("agentleases", namespace, "held")["agent"])


def start_runs(api: Api, namespace: str, runs: dict[str, str]) -> None:
    """A run of ``ITEMS`` items on each pool, by run name; returns once the first is halfway."""
    for name, pool in runs.items():
        items = [{"id": f"{name}-{n:03}"} for n in range(ITEMS)]
        start_run(api, namespace, name, items, poolRef={"name": pool}, itemId="id")
    first = next(iter(runs))
    wait_for(
        lambda: run_status(api, namespace, first).get("succeeded", 0) >= ITEMS // 5,
        "the run under way",
    )


def assert_runs_whole(
    api: Api,
    namespace: str,
    record: Path,
    *,
    moved: str,
    stayed: str,
    recorded: set[str] | None = None,
) -> None:
    """Both runs end with every item recorded; the one whose pool did not move ran each item
    once. The moved one, handed over, ran again at most the one item its agent had in flight;
    after a crash (``recorded``: its items in its status at the crash), none of those, though
    it may run again what finished after its last status write: the crashed replica's journal
    stays with its pod."""
    for name in (moved, stayed):
        status = finished_run(api, namespace, name, 120)
        assert (status["phase"], status["succeeded"], status["total"]) == (
            "Succeeded",
            ITEMS,
            ITEMS,
        )
    seen = invocations(record)
    assert all(len(seen[f"{stayed}-{n:03}"]) == 1 for n in range(ITEMS))
    again = [f"{moved}-{n:03}" for n in range(ITEMS) if len(seen[f"{moved}-{n:03}"]) > 1]
    assert all(seen[f"{moved}-{n:03}"] for n in range(ITEMS))
    if recorded is None:
        assert len(again) <= 1, again
    else:
        assert not set(again) & recorded, "an item recorded before the crash ran again"


def assert_lease_kept(api: Api, namespace: str, pool: str, agent: str, replica: str) -> None:
    """The lease bound before the move is still Bound to its agent and follows its pool to
    ``replica``, which drives it: its deletion gives the agent back."""
    lease = api.get("agentleases", namespace, "held")
    assert (lease["status"]["phase"], lease["status"]["agent"]) == ("Bound", agent)
    wait_for(
        lambda: (
            api.get("agentleases", namespace, "held")["metadata"]["labels"].get(REPLICA) == replica
        ),
        "the lease labelled with its pool's replica",
    )
    api.delete("agentleases", namespace, "held")
    wait_for(
        lambda: api.status("agentpools", namespace, pool).get("available") == 1,
        "the lease's agent back in its pool",
    )


def gateways(api: Api, namespace: str, replicas: set[str], group: str) -> dict[str, Gateway]:
    """Each live replica's own gateway, as its Lease names it, trusting the published CA."""
    ca = Gateway.of(api, namespace).ca_pem
    coordination = kubernetes.client.CoordinationV1Api(api.client)
    found = {}
    selector = f"agentpool.dev/share={group}"
    for lease in coordination.list_namespaced_lease("default", label_selector=selector).items:
        url = (lease.metadata.annotations or {}).get("agentpool.dev/gateway")
        if lease.spec.holder_identity in replicas and url:
            found[lease.spec.holder_identity] = Gateway(url, ca, namespace)
    return found


def call_everywhere(
    api: Api, namespace: str, replicas: set[str], pools: list[str], group: str
) -> None:
    """A call to each pool through each replica's gateway is answered by the pool's agent,
    whichever replica works on the pool."""
    token = caller_token(api, namespace, f"caller-{len(replicas)}", bound=True)
    found = wait_for(
        lambda: (seen := gateways(api, namespace, replicas, group)).keys() == replicas and seen,
        "every replica's gateway named in its Lease",
    )
    for replica, gateway in sorted(found.items()):
        for pool in pools:
            item = {"through": replica, "pool": pool}
            reply = gateway.call(pool, item, token=token)
            assert reply.status == 200, (replica, pool, reply)
            digest = hashlib.sha256(
                json.dumps(item, sort_keys=True, separators=(",", ":")).encode()
            )
            assert reply.body["output"]["digest"] == digest.hexdigest()


def show_logs(replicas: list[Replica]) -> None:
    for replica in replicas:
        replica.stop()
        # Shown when the test fails.
        print(f"--- {replica.identity}:\n{replica.log()[-4000:]}")


def test_a_crashed_replica_gives_only_its_own_pools_and_loses_nothing(
    replica_cluster: ReplicaCluster,
) -> None:
    """Three replicas; the one SIGKILLed works on a pool with a Bound lease and one with a run
    halfway: they go to the others and no other pool moves; the lease stays Bound to its agent;
    the run ends with every item recorded; a run on another replica's pool runs untouched; the
    Lease the killed replica could not give up is deleted."""
    api, directory = replica_cluster.api, replica_cluster.dir
    replicas = [replica_cluster.replica(name) for name in ("r-a", "r-b", "r-c")]
    for replica in replicas:
        replica.start()
    try:
        namespace = replica_cluster.new_namespace()
        everyone, survivors = {"r-a", "r-b", "r-c"}, {"r-a", "r-b"}
        leased = pool_named(namespace, "lease", lambda at: at(everyone) == "r-c")
        running = pool_named(namespace, "run", lambda at: at(everyone) == "r-c")
        stays = pool_named(namespace, "stay", lambda at: at(everyone) == "r-a")
        record = directory / "invocations.jsonl"
        make_pools(api, namespace, [leased, running, stays], record)
        placed = {leased: "r-c", running: "r-c", stays: "r-a"}
        wait_for(lambda: served(api, namespace, placed), "every pool served")
        call_everywhere(api, namespace, everyone, [running, stays], replica_cluster.group)
        agent = bind(api, namespace, leased)
        start_runs(api, namespace, {"moved": running, "stayed": stays})
        replicas[2].kill()
        recorded = set(run_status(api, namespace, "moved").get("items") or {})
        after = {pool: choose((namespace, pool), survivors) or "" for pool in placed}
        wait_for(lambda: served(api, namespace, after), "the crashed replica's pools served")
        assert owner(api, namespace, stays) == "r-a"
        call_everywhere(api, namespace, survivors, [running, stays], replica_cluster.group)
        assert_runs_whole(api, namespace, record, moved="moved", stayed="stayed", recorded=recorded)
        assert_lease_kept(api, namespace, leased, agent, after[leased])
        # Deleted once lapsed: a replica started later would count it live for a while.
        coordination = kubernetes.client.CoordinationV1Api(api.client)
        killed = replica_cluster.lease_name("r-c")
        wait_for(
            lambda: (
                killed
                not in {
                    lease.metadata.name
                    for lease in coordination.list_namespaced_lease("default").items
                }
            ),
            "the killed replica's Lease deleted",
        )
    finally:
        show_logs(replicas)


def test_a_replica_that_joins_takes_its_share_by_hand_over_and_one_that_stops_gives_it_back(
    replica_cluster: ReplicaCluster,
) -> None:
    """Two replicas; a third joins while a lease of one pool is Bound and a run on another is
    under way: both pools are handed to it, with the lease kept Bound and the run whole, and a
    pool that is not its share stays. Sent SIGTERM, it gives its Lease up as it exits, and its
    pools go back."""
    api, directory = replica_cluster.api, replica_cluster.dir
    replicas = [replica_cluster.replica(name) for name in ("r-a", "r-b", "r-c")]
    first, everyone = {"r-a", "r-b"}, {"r-a", "r-b", "r-c"}
    for replica in replicas[:2]:
        replica.start()
    try:
        namespace = replica_cluster.new_namespace()
        leased = pool_named(namespace, "lease", lambda at: at(everyone) == "r-c")
        running = pool_named(namespace, "run", lambda at: at(everyone) == "r-c")
        stays = pool_named(namespace, "stay", lambda at: at(everyone) == at(first))
        record = directory / "invocations.jsonl"
        make_pools(api, namespace, [leased, running, stays], record)
        before = {pool: choose((namespace, pool), first) or "" for pool in (leased, running, stays)}
        wait_for(lambda: served(api, namespace, before), "every pool served")
        agent = bind(api, namespace, leased)
        start_runs(api, namespace, {"moved": running, "stayed": stays})
        replicas[2].start()
        joined = {leased: "r-c", running: "r-c", stays: before[stays]}
        wait_for(lambda: served(api, namespace, joined), "the joined replica's share served")
        assert_runs_whole(api, namespace, record, moved="moved", stayed="stayed")
        assert_lease_kept(api, namespace, leased, agent, "r-c")
        replicas[2].stop()
        coordination = kubernetes.client.CoordinationV1Api(api.client)
        names = {
            lease.metadata.name for lease in coordination.list_namespaced_lease("default").items
        }
        assert replica_cluster.lease_name("r-c") not in names, "the stopped replica's Lease is gone"
        wait_for(lambda: served(api, namespace, before), "its pools back with the first two")
    finally:
        show_logs(replicas)
