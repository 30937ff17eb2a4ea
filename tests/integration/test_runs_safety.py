"""PoolRun data safety on the local cluster: nothing a user gave is lost or mixed up.

Ids shaped like the keys the operator makes up for bad items, and resources re-created under
an old name, each once lost or refused work; these tests hold the operator to the fix.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from operator_support import Api, gated_pool, pool_spec
from run_support import condition, finished_run, ready_pool, run_status, start_run

from cluster import wait_for


def test_ids_shaped_like_made_up_keys_lose_no_item(api: Api, namespace: str) -> None:
    """A real id ``[1]`` next to an item without an id, and a real ``same[1]`` after two
    ``same``: every item ends in its own record, the id-less and the duplicate item still fail,
    and the real ones run."""
    api.create("agentpools", namespace, "p", pool_spec("echo", minSize=1))
    pool = {"poolRef": {"name": "p"}, "itemId": "id", "failures": "Report"}
    start_run(api, namespace, "shaped", [{"id": "[1]"}, {"n": 1}, {"id": "z"}], **pool)
    twins: list[Any] = [{"id": "same"}, {"id": "same"}, {"id": "same[1]"}]
    start_run(api, namespace, "twins", twins, **pool)

    shaped = finished_run(api, namespace, "shaped")
    assert (shaped["total"], shaped["succeeded"], shaped["failed"]) == (3, 2, 1)
    assert shaped["items"] == {"[1]": {"id": "[1]"}, "z": {"id": "z"}}
    assert [f["reason"] for f in shaped["failures"].values()] == ["MissingId"]

    twins_status = finished_run(api, namespace, "twins")
    assert (twins_status["total"], twins_status["succeeded"], twins_status["failed"]) == (3, 2, 1)
    assert twins_status["items"] == {"same": {"id": "same"}, "same[1]": {"id": "same[1]"}}
    assert [f["reason"] for f in twins_status["failures"].values()] == ["DuplicateId"]


def test_a_pool_and_run_recreated_under_old_names_start_fresh(api: Api, namespace: str) -> None:
    """Delete a pool and its finished run, then create both again with the same names, as
    ``kubectl delete -f`` then ``kubectl apply -f`` does: the new run is a new run on a new pool,
    and it succeeds rather than failing at once on the old pool's deletion."""
    items: list[Any] = [{"id": f"i{n}"} for n in range(3)]
    spec = {"poolRef": {"name": "qs"}, "itemId": "id"}
    for round_ in ("first", "second"):
        api.create("agentpools", namespace, "qs", pool_spec("echo", minSize=1))
        start_run(api, namespace, "qs-run", items, **spec)
        status = finished_run(api, namespace, "qs-run")
        assert status["phase"] == "Succeeded", (round_, status.get("message"))
        assert status["items"] == {item["id"]: item for item in items}
        api.delete("poolruns", namespace, "qs-run")
        api.delete("agentpools", namespace, "qs")
        wait_for(
            lambda: (
                not api.exists("poolruns", namespace, "qs-run")
                and not api.exists("agentpools", namespace, "qs")
            ),
            60,
            message="the run and the pool are gone",
        )


def test_a_pool_deleted_under_its_run_lets_items_in_flight_finish(
    api: Api, namespace: str, tmp_path: Path
) -> None:
    """Deleting the pool while its run goes on: the item on the pool's one agent finishes and
    its output is kept, the item waiting in the pool's line and the one not taken up never
    start, and the run ends Failed, Deadlocked, its message naming the pool."""
    api.create("agentpools", namespace, "p", gated_pool(minSize=1, maxSize=1))
    ready_pool(api, namespace, "p", 1)
    gate = tmp_path / "gate"
    items = [{"id": f"i{n}", "gate": str(gate)} for n in range(3)]
    spec = {"poolRef": {"name": "p"}, "itemId": "id", "cap": 2, "checkoutTimeoutSeconds": 10}
    start_run(api, namespace, "orphan", items, **spec)
    wait_for(
        lambda: api.status("agentpools", namespace, "p").get("busy") == 1,
        60,
        message="an item on the pool's agent",
    )
    api.delete("agentpools", namespace, "p")
    # The operator has closed the pool's line once the waiting item is parked on it; only then
    # may the agent come free, or a slow operator would hand it the waiting item first.
    wait_for(
        lambda: (
            next(
                (
                    c
                    for c in run_status(api, namespace, "orphan").get("conditions", [])
                    if c["type"] == "Waiting" and c["status"] == "True"
                ),
                {},
            ).get("reason")
            == "PoolNotFound"
        ),
        60,
        message="the waiting item parked on the deleted pool",
    )
    gate.touch()
    status = finished_run(api, namespace, "orphan")
    assert (status["phase"], status["result"]) == ("Failed", "Deadlocked")
    (done,) = status["items"].items()
    assert done[1] == {"id": done[0], "gate": str(gate)}
    assert (status["succeeded"], status["failed"], status["total"]) == (1, 0, 3)
    assert status["message"].startswith("2 of 3 items could not start: ")
    assert '"p"' in status["message"], status["message"]
    wait_for(lambda: not api.exists("agentpools", namespace, "p"), 60, message="the pool gone")


def test_a_running_runs_source_cannot_change_under_it(api: Api, namespace: str) -> None:
    """Swapping a running run's source for another kind is refused by the API server, and
    replacing its inline items (free JSON, which CEL cannot see) fails the run with reason
    SourceChanged instead of mixing two lists of items."""
    env = {"SLOW_START_SECONDS": "0", "WORK_SECONDS": "0.5"}
    api.create("agentpools", namespace, "p", pool_spec("slow_start", env=env, minSize=1))
    items: list[Any] = [{"id": f"i{n}"} for n in range(20)]
    start_run(api, namespace, "moving", items, poolRef={"name": "p"}, itemId="id")
    wait_for(
        lambda: run_status(api, namespace, "moving").get("succeeded", 0) >= 1,
        60,
        message="the run is under way",
    )
    swap = {"source": {"items": None, "http": {"url": "http://127.0.0.1:1/"}}}
    with pytest.raises(kubernetes.client.ApiException) as refused:
        api.patch_spec("poolruns", namespace, "moving", swap)
    assert refused.value.status == 422
    assert "source" in str(refused.value.body)

    api.patch_spec("poolruns", namespace, "moving", {"source": {"items": [{"id": "other"}]}})
    status = finished_run(api, namespace, "moving")
    assert status["phase"] == "Failed"
    assert condition(status, "Failed")["reason"] == "SourceChanged"
    assert "other" not in status["items"]
    assert status["succeeded"] < len(items)


def test_a_configmap_changed_while_the_operator_was_away_fails_the_run(
    api: Api, namespace: str, operator_cluster: Any
) -> None:
    """A ConfigMap source is read once and pinned: when it changed while the operator was
    down, the resumed run fails with reason SourceChanged rather than running a mix of old and
    new items."""
    env = {"SLOW_START_SECONDS": "0", "WORK_SECONDS": "0.5"}
    api.create("agentpools", namespace, "p", pool_spec("slow_start", env=env, minSize=1))
    text = "\n".join(json.dumps({"id": f"i{n}"}) for n in range(20))
    configmap = kubernetes.client.V1ConfigMap(
        metadata=kubernetes.client.V1ObjectMeta(name="work"), data={"items.jsonl": text}
    )
    api.core.create_namespaced_config_map(namespace, configmap)
    start_run(
        api,
        namespace,
        "pinned",
        source={"configMapRef": {"name": "work", "key": "items.jsonl"}},
        poolRef={"name": "p"},
        itemId="id",
    )
    wait_for(
        lambda: run_status(api, namespace, "pinned").get("succeeded", 0) >= 1,
        60,
        message="the run is under way",
    )
    operator_cluster.operator.kill()
    try:
        changed = {"items.jsonl": json.dumps({"id": "new"})}
        api.core.patch_namespaced_config_map("work", namespace, {"data": changed})
    finally:
        operator_cluster.operator.start()
    status = finished_run(api, namespace, "pinned")
    assert status["phase"] == "Failed"
    assert condition(status, "Failed")["reason"] == "SourceChanged"
    assert "configmap work" in condition(status, "Failed")["message"]
    assert "new" not in status["items"]
