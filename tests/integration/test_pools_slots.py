"""A pool with several slots per agent on the local cluster: one warm pod serves a run's items
side by side, and the pool's status counts the slots they hold."""

from __future__ import annotations

from pathlib import Path

from operator_support import Api, gated_pool
from pool_support import pool_status
from run_support import finished_run, ready_pool, start_run

from cluster import wait_for


def test_one_pod_with_four_slots_runs_four_items_at_once(
    api: Api, namespace: str, tmp_path: Path
) -> None:
    """A PoolRun of 8 items at cap 8 through a pool of one pod with slots 4: the pool reports 4
    of its 4 slots busy on that one pod while the items wait at their gate, the other 4 waiting
    for a slot and no second pod created (maxSize 1), and once the gate opens every item drains
    with its output."""
    api.create("agentpools", namespace, "wide", gated_pool(minSize=1, maxSize=1, slots=4))
    ready_pool(api, namespace, "wide", 1)
    gate = tmp_path / "gate"
    items = [{"id": f"i{n}", "gate": str(gate)} for n in range(8)]
    start_run(api, namespace, "side-by-side", items, poolRef={"name": "wide"}, itemId="id", cap=8)

    def four_busy() -> bool:
        status = pool_status(api, namespace, "wide")
        counts = ("busySlots", "slots", "busy", "waiting", "replicas")
        return tuple(status.get(key) for key in counts) == (4, 4, 1, 4, 1)

    wait_for(four_busy, 60, message="4 of 4 slots busy on one agent, 4 checkouts waiting")
    gate.touch()
    run = finished_run(api, namespace, "side-by-side")
    assert (run["phase"], run["succeeded"]) == ("Succeeded", 8)
    assert run["items"] == {item["id"]: item for item in items}
    assert pool_status(api, namespace, "wide")["replicas"] == 1
