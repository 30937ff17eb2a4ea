"""PoolRun durability and scale on the local cluster: operator kills, 20,000 items, large specs.

Each test drives the real operator (its own process) and the example agents through the public
surface. A SIGKILL of the operator must lose nothing: items recorded (in status or in the run's
journal) never run again, and those in flight run again with their attempt raised.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from operator_support import Api, pool_spec
from run_support import (
    SourceService,
    agentpool_cli,
    finished_run,
    invocations,
    ready_pool,
    run_status,
    start_run,
)

from cluster import wait_for


def test_a_killed_operator_resumes_without_running_a_recorded_item_again(
    api: Api, namespace: str, operator_cluster: Any, scratch: Path
) -> None:
    """SIGKILL the operator in the middle of 500 items: after a restart all 500 are recorded, no
    item recorded before the kill ran again, at most `cap` items ran twice (those in flight, with
    their attempt raised; those that had finished come back from the run's journal), and the
    whole run cost at most 30 status writes (counted where the API server counts requests: on
    the local cluster)."""
    cap = 25
    record = scratch / "invocations.jsonl"
    env = {"SLOW_START_SECONDS": "0", "WORK_SECONDS": "0.04", "INVOCATIONS_FILE": str(record)}
    api.create(
        "agentpools", namespace, "steady", pool_spec("slow_start", env=env, minSize=10, maxSize=10)
    )
    ready_pool(api, namespace, "steady", 10)
    items = [{"id": f"i{n:03}"} for n in range(500)]
    writes = ("patch", "poolruns/status")
    counted = operator_cluster.handle.local
    before = operator_cluster.handle.api_counts().get(writes, 0) if counted else 0
    start_run(api, namespace, "durable", items, poolRef={"name": "steady"}, itemId="id", cap=cap)

    def midway() -> bool:
        # Kill when more than cap items were called and are not written yet: more than the
        # 10 agents hold, so some of them finished since the last status write.
        done = run_status(api, namespace, "durable").get("succeeded", 0)
        return bool(done >= 150 and sum(map(len, invocations(record).values())) > done + cap)

    wait_for(midway, 60, interval=0.01, message="150 items recorded and more running")
    operator_cluster.operator.kill()
    at_kill = run_status(api, namespace, "durable")
    unrecorded_calls = set(invocations(record)) - set(at_kill["items"])
    recorded = set(at_kill["items"])
    in_flight = set(at_kill.get("inFlight", {}))
    operator_cluster.operator.start()
    status = finished_run(api, namespace, "durable", 120)
    after = operator_cluster.handle.api_counts().get(writes, 0) if counted else 0
    assert (status["phase"], status["result"]) == ("Succeeded", "Drained")
    assert (status["succeeded"], status["failed"], status["total"]) == (500, 0, 500)
    assert set(status["items"]) == {item["id"] for item in items}
    assert 150 <= len(recorded) < 500, "the kill came in the middle of the run"
    seen = invocations(record)
    assert set(seen) == set(status["items"])
    assert all(len(seen[key]) == 1 for key in recorded), "a recorded item ran again"
    again = {key for key, calls in seen.items() if len(calls) > 1}
    # Called but not written at the kill, and not run again: finished, and read back from the
    # journal. (A status write may land between the wait above and the kill; the items that
    # finish after it are enough.)
    assert unrecorded_calls - again, "no item finished after the last write came from the journal"
    assert len(again) <= cap, f"{len(again)} items ran again"
    assert all(len(seen[key]) == 2 for key in again)
    assert again <= unrecorded_calls, "only items not written at the kill may run again"
    for key in again:
        assert seen[key][1]["attempt"] == seen[key][0]["attempt"] + 1
    for key in again & in_flight:
        assert seen[key][1]["attempt"] == at_kill["inFlight"][key] + 1
    if counted:
        assert after - before <= 30, f"{after - before} status writes"
    print(
        f"500 items, killed at {len(recorded)} recorded, {len(unrecorded_calls)} called but not "
        f"written: {len(again)} ran again ({len(again & in_flight)} written as in flight), "
        f"{after - before} status writes"
    )


def test_twenty_thousand_items_from_a_source_service_keep_the_object_small(
    api: Api, namespace: str, operator_cluster: Any
) -> None:
    """20,000 items from an HTTP source service, each with a 2 KiB output: the run drains, its
    object stays under 256 KiB (results go to ConfigMaps it owns), and `agentpool results`
    prints all 20,000 outputs."""
    count = 20_000
    env = {"SLOW_START_SECONDS": "0", "WORK_SECONDS": "0"}
    api.create("agentpools", namespace, "wide", pool_spec("slow_start", env=env, minSize=8))
    ready_pool(api, namespace, "wide", 8)
    with SourceService(count, lambda n: {"id": f"i{n:05}", "outputBytes": 2048}) as source:
        started = time.monotonic()
        start_run(
            api,
            namespace,
            "bulk",
            poolRef={"name": "wide"},
            source={"http": {"url": source.url}},
            itemId="id",
            cap=64,
        )
        status = finished_run(api, namespace, "bulk", 240)
        elapsed = time.monotonic() - started
    assert (status["phase"], status["result"]) == ("Succeeded", "Drained"), status.get("message")
    assert (status["succeeded"], status["failed"], status["total"]) == (count, 0, count)
    size = len(json.dumps(api.get("poolruns", namespace, "bulk")))
    assert size < 256 * 1024
    assert status["resultRefs"]
    printed = agentpool_cli("results", "bulk", "-n", namespace, *operator_cluster.connection)
    assert printed.returncode == 0, printed.stderr
    records = [json.loads(line) for line in printed.stdout.splitlines()]
    assert len(records) == count
    assert {record["id"] for record in records} == {f"i{n:05}" for n in range(count)}
    assert all(len(record["output"]["padding"]) == 2048 for record in records)
    print(
        f"20,000 items over HTTP at cap 64: {elapsed:.1f}s, object {size / 1024:.0f} KiB, "
        f"{len(status['resultRefs'])} result ConfigMaps, {source.requests} source requests"
    )


def test_a_run_with_400_kib_of_inline_items_can_be_suspended_and_resumed(
    api: Api, namespace: str, operator_cluster: Any
) -> None:
    """Inline items past the API server's 256 KiB limit on annotations: the operator follows
    `suspend` from each watched event and keeps no copy of the run's spec on it, so a suspend and
    a resume are handled without a refused write, and the run drains with every output recorded."""
    env = {"SLOW_START_SECONDS": "0", "WORK_SECONDS": "0"}
    api.create("agentpools", namespace, "roomy", pool_spec("slow_start", env=env, minSize=4))
    ready_pool(api, namespace, "roomy", 4)
    items = [{"id": f"i{n:04}", "text": "x" * 400} for n in range(1000)]
    assert len(json.dumps(items)) > 400 * 1024
    start_run(
        api, namespace, "roomy", items, poolRef={"name": "roomy"}, itemId="id", cap=8, suspend=True
    )
    wait_for(
        lambda: run_status(api, namespace, "roomy").get("phase") == "Suspended",
        30,
        message="run suspended",
    )
    api.patch_spec("poolruns", namespace, "roomy", {"suspend": False})
    status = finished_run(api, namespace, "roomy", 120)
    assert (status["phase"], status["result"]) == ("Succeeded", "Drained"), status.get("message")
    assert status["succeeded"] == 1000
    annotations = api.get("poolruns", namespace, "roomy")["metadata"].get("annotations") or {}
    assert sum(len(k) + len(v) for k, v in annotations.items()) < 4096, list(annotations)
    assert "Too long" not in operator_cluster.operator.log()


def test_items_in_flight_at_a_kill_run_again_with_their_attempt_raised(
    api: Api, namespace: str, operator_cluster: Any, scratch: Path
) -> None:
    """Items longer than the status interval are written as in flight; after a SIGKILL of the
    operator each runs again with its attempt raised, `retries` counts those attempts, and every
    item is recorded once."""
    record = scratch / "invocations.jsonl"
    env = {"SLOW_START_SECONDS": "0", "WORK_SECONDS": "2", "INVOCATIONS_FILE": str(record)}
    api.create("agentpools", namespace, "long", pool_spec("slow_start", env=env, minSize=3))
    ready_pool(api, namespace, "long", 3)
    items = [{"id": f"i{n}"} for n in range(6)]
    start_run(api, namespace, "lengthy", items, poolRef={"name": "long"}, itemId="id", cap=3)

    def written_and_called() -> dict[str, Any] | None:
        # In flight covers an item's checkout and its request on the way too: kill only once
        # the agents have the three, or one may never have seen its first attempt.
        status = run_status(api, namespace, "lengthy")
        in_flight = status.get("inFlight") or {}
        called = invocations(record)
        return status if len(in_flight) == 3 and all(key in called for key in in_flight) else None

    at_kill = wait_for(written_and_called, 30, message="three items written in flight and called")
    operator_cluster.operator.kill()
    written = at_kill["inFlight"]
    operator_cluster.operator.start()
    status = finished_run(api, namespace, "lengthy", 60)
    assert (status["phase"], status["succeeded"]) == ("Succeeded", 6)
    assert status.get("inFlight", {}) == {}
    calls = invocations(record)
    for key, attempt in written.items():
        assert [call["attempt"] for call in calls[key]] == [attempt, attempt + 1]
    assert all(len(calls[item["id"]]) == 1 for item in items if item["id"] not in written)
    assert status["retries"] == sum(max(c["attempt"] for c in made) - 1 for made in calls.values())


def test_deleting_a_running_run_removes_its_journal(
    api: Api, namespace: str, operator_cluster: Any
) -> None:
    """A run's journal lives in the operator's state directory while the run does: deleting the
    run in the middle removes it, so a busy operator's disk holds only running runs."""
    env = {"SLOW_START_SECONDS": "0", "WORK_SECONDS": "0.2"}
    api.create("agentpools", namespace, "brief", pool_spec("slow_start", env=env, minSize=2))
    ready_pool(api, namespace, "brief", 2)
    start_run(
        api,
        namespace,
        "doomed",
        [{"id": f"d{n}"} for n in range(100)],
        poolRef={"name": "brief"},
        itemId="id",
        cap=2,
    )
    uid = api.get("poolruns", namespace, "doomed")["metadata"]["uid"]
    # The operator's, or the one of its replicas the run is on.
    journals = [state / "runs" / uid for state in operator_cluster.operator.state_dirs]
    wait_for(lambda: run_status(api, namespace, "doomed").get("succeeded", 0) >= 2, 30)
    assert any(journal.is_dir() for journal in journals), "the running run keeps a journal"
    api.delete("poolruns", namespace, "doomed")
    wait_for(
        lambda: not any(journal.exists() for journal in journals),
        30,
        message="the deleted run's journal removed",
    )
