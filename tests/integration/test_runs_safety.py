"""PoolRun data safety on the local cluster: nothing a user gave is lost or mixed up.

Ids shaped like the keys the operator makes up for bad items, and resources re-created under
an old name, each once lost or refused work; these tests hold the operator to the fix.
"""

from __future__ import annotations

from typing import Any

from operator_support import Api, pool_spec
from run_support import finished_run, start_run

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
