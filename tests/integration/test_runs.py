"""PoolRun on the local cluster: every acceptance point of the run engine, as a user sees it.

Each test drives the real operator (its own process) and the example agents through the public
surface: the kubernetes client, kubectl, and the ``agentpool`` command. Agents that record their
invocations (``INVOCATIONS_FILE``) let a test count exactly what ran, across operator restarts.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from operator_support import REPO, Api, pool_spec
from run_support import (
    SourceService,
    agentpool_cli,
    closed_port_url,
    condition,
    finished_run,
    invocations,
    ready_pool,
    run_status,
    start_run,
)

from cluster import wait_for


def test_two_hundred_items_drain_with_every_output_by_id(
    api: Api, namespace: str, kubectl_op: Any
) -> None:
    """200 items at cap 8 through a pool of 4 to 8: the run drains, every output is recorded
    under its item's id, and kubectl shows DONE 200 and satisfies `wait --for=condition=Complete`.
    """
    api.create("agentpools", namespace, "p", pool_spec("echo", minSize=4, maxSize=8))
    ready_pool(api, namespace, "p", 4)
    items = [{"id": f"item-{n:03}", "n": n, "text": f"text {n}"} for n in range(200)]
    started = time.monotonic()
    start_run(api, namespace, "two-hundred", items, poolRef={"name": "p"}, itemId="id", cap=8)
    kubectl_op(
        "wait",
        "--for=condition=Complete",
        "poolrun/two-hundred",
        "-n",
        namespace,
        "--timeout=120s",
        timeout=130,
    )
    elapsed = time.monotonic() - started
    status = run_status(api, namespace, "two-hundred")
    assert (status["phase"], status["result"]) == ("Succeeded", "Drained")
    assert status["items"] == {item["id"]: item for item in items}
    assert (status["succeeded"], status["failed"], status["total"]) == (200, 0, 200)
    assert status.get("failures", {}) == {}
    table = kubectl_op("get", "poolruns", "-n", namespace).stdout.splitlines()
    assert table[0].split() == [
        "NAME", "POOL", "PHASE", "RESULT", "DONE", "FAILED", "ACTIVE", "TOTAL", "AGE"
    ]  # fmt: skip
    assert table[1].split()[:8] == [
        "two-hundred", "p", "Succeeded", "Drained", "200", "0", "0", "200"
    ]  # fmt: skip
    wait_for(
        lambda: {"Started", "Drained"} <= set(api.event_reasons(namespace)),
        10,
        message="Started and Drained events",
    )
    print(f"200 items at cap 8: {elapsed:.1f}s from create to Complete")


def test_a_batched_source_service_hands_out_many_items_per_request(
    api: Api, namespace: str
) -> None:
    """A source service that answers as many items as each request allows ({"items": [...]})
    beside one that answers an item a request: both runs drain with every output by id, and the
    batched one needs far fewer requests, each allowing at most twice the cap."""
    api.create("agentpools", namespace, "p", pool_spec("echo", minSize=4, maxSize=4))
    ready_pool(api, namespace, "p", 4)

    def make(n: int) -> dict[str, Any]:
        return {"id": f"s{n:03}", "n": n}

    pool = {"poolRef": {"name": "p"}, "itemId": "id", "cap": 4}
    with (
        SourceService(120, make, batch=True) as batched,
        SourceService(40, make) as single,
    ):
        start_run(api, namespace, "batched", source={"http": {"url": batched.url}}, **pool)
        start_run(api, namespace, "single", source={"http": {"url": single.url}}, **pool)
        status = finished_run(api, namespace, "batched")
        other = finished_run(api, namespace, "single")
    assert (status["phase"], status["result"]) == ("Succeeded", "Drained")
    assert status["items"] == {make(n)["id"]: make(n) for n in range(120)}
    assert status["total"] == 120
    assert batched.requests <= 120 // 3, f"{batched.requests} requests for 120 items"
    assert all(1 <= most <= 8 for most in batched.maxes)
    assert (other["phase"], other["succeeded"]) == ("Succeeded", 40)


def fifty_items_five_failing() -> list[dict[str, Any]]:
    return [
        {"id": f"i{n:02}", "n": n, **({"fail": True, "message": f"bad {n}"} if n % 10 == 3 else {})}
        for n in range(50)
    ]


def test_failed_items_fail_the_run_under_fail_and_are_reported_under_report(
    api: Api, namespace: str
) -> None:
    """5 failing items of 50: under Fail the run is Failed with "5 of 50 items failed"; under
    Report it Succeeds, Drained; both record every failure with reason, message, attempts and
    agent, and the 45 other outputs, so a failed item stops only itself."""
    api.create("agentpools", namespace, "flaky", pool_spec("flaky", minSize=2, maxSize=4))
    items = fifty_items_five_failing()
    failing = {item["id"] for item in items if item.get("fail")}
    common = {"poolRef": {"name": "flaky"}, "itemId": "id", "cap": 4}
    start_run(api, namespace, "strict", items, failures="Fail", **common)
    start_run(api, namespace, "lenient", items, failures="Report", **common)
    agents = set()
    for name, phase in (("strict", "Failed"), ("lenient", "Succeeded")):
        status = finished_run(api, namespace, name)
        assert (status["phase"], status["result"]) == (phase, "Drained"), status.get("message")
        assert (status["succeeded"], status["failed"], status["total"]) == (45, 5, 50)
        assert set(status["items"]) == {item["id"] for item in items} - failing
        assert all(status["items"][key]["item"]["id"] == key for key in status["items"])
        assert set(status["failures"]) == failing
        for key, failure in status["failures"].items():
            assert failure["reason"] == "HandlerError"
            assert f"bad {int(key[1:])}" in failure["message"]
            assert failure["attempts"] == 1
            agents.add(failure["agent"])
        if phase == "Failed":
            assert status["message"] == "5 of 50 items failed"
            assert condition(status, "Failed")["status"] == "True"
            assert condition(status, "Complete")["status"] == "False"
        else:
            assert condition(status, "Complete")["status"] == "True"
            assert "5 of 50 items failed" in status["message"]
    pods = {pod["metadata"]["name"] for pod in api.pods(namespace, "flaky")}
    assert agents <= pods
    # Events are posted in the background: the last may follow the status that ends the run.
    wait_for(lambda: "ItemFailed" in api.event_reasons(namespace), 10, message="ItemFailed")


def test_an_item_that_fails_once_succeeds_on_its_second_attempt(
    api: Api, namespace: str, scratch: Path
) -> None:
    """With maxAttempts 2 an item failing its first attempt succeeds on the second: its output
    says attempt 2, status counts one retry, and the agents saw attempts 1 then 2."""
    record = scratch / "invocations.jsonl"
    api.create(
        "agentpools",
        namespace,
        "retry",
        pool_spec("flaky", env={"INVOCATIONS_FILE": str(record)}, minSize=2),
    )
    items = [{"id": "once", "failTimes": 1}, {"id": "fine"}]
    start_run(
        api,
        namespace,
        "again",
        items,
        poolRef={"name": "retry"},
        itemId="id",
        maxAttempts=2,
        backoffSeconds=0,
        cap=2,
    )
    status = finished_run(api, namespace, "again")
    assert (status["phase"], status["result"]) == ("Succeeded", "Drained")
    assert status.get("failures", {}) == {}
    assert status["items"]["once"] == {"id": "once", "attempt": 2, "item": items[0]}
    assert status["items"]["fine"]["attempt"] == 1
    assert (status["succeeded"], status["retries"]) == (2, 1)
    seen = invocations(record)
    assert [call["attempt"] for call in seen["once"]] == [1, 2]
    assert [call["attempt"] for call in seen["fine"]] == [1]


def test_runs_that_can_never_start_end_deadlocked_naming_the_cause(
    api: Api, namespace: str
) -> None:
    """A run against a missing pool, and one against a pool whose agents never become Ready, end
    Deadlocked once the checkout timeout has passed, with a message naming the cause."""
    api.create(
        "agentpools",
        namespace,
        "cold",
        pool_spec("slow_start", env={"SLOW_START_SECONDS": "inf"}, minSize=1),
    )
    started = time.monotonic()
    items = [{"id": f"i{n}"} for n in range(3)]
    common = {"itemId": "id", "checkoutTimeoutSeconds": 3}
    start_run(api, namespace, "nowhere", items, poolRef={"name": "absent"}, **common)
    start_run(api, namespace, "never", items, poolRef={"name": "cold"}, **common)
    for name, cause in (("nowhere", 'AgentPool "absent" not found'), ("never", 'pool "cold"')):
        status = finished_run(api, namespace, name, 60)
        assert (status["phase"], status["result"]) == ("Failed", "Deadlocked")
        assert cause in status["message"], status["message"]
        assert "3 of 3 items could not start" in status["message"]
        assert condition(status, "Failed")["reason"] == "Deadlocked"
        assert status["succeeded"] == status["failed"] == status["active"] == 0
    assert time.monotonic() - started >= 3
    message = run_status(api, namespace, "never")["message"]
    assert "ready 0" in message, message
    # Events are posted in the background: the last may follow the status that ends the run.
    wait_for(lambda: "Deadlocked" in api.event_reasons(namespace), 10, message="Deadlocked")


def test_bad_items_and_sources_fail_clearly_and_lose_nothing_else(api: Api, namespace: str) -> None:
    """A duplicate id fails only that item; a ConfigMap that is not JSON, a missing ConfigMap,
    an unreachable source URL and a source that breaks mid-run fail the run with a message
    naming the source; a missing pool among routes deadlocks only its items. Every other item's
    output is kept."""
    api.create("agentpools", namespace, "p", pool_spec("echo", minSize=2))
    # The half-routed run gives checkouts 2 s: its pool must be warm first, or on a loaded
    # machine its good items time out with the missing pool's.
    ready_pool(api, namespace, "p", 2)
    api.core.create_namespaced_config_map(
        namespace,
        kubernetes.client.V1ConfigMap(
            metadata=kubernetes.client.V1ObjectMeta(name="garbled"),
            data={"items.json": "[1, 2,\nnot json"},
        ),
    )
    pool = {"poolRef": {"name": "p"}}
    start_run(
        api,
        namespace,
        "twins",
        [{"id": "a"}, {"id": "b"}, {"id": "a", "second": True}],
        itemId="id",
        cap=2,
        **pool,
    )
    start_run(
        api,
        namespace,
        "garbled",
        source={"configMapRef": {"name": "garbled", "key": "items.json"}},
        **pool,
    )
    start_run(
        api,
        namespace,
        "unlisted",
        source={"configMapRef": {"name": "absent", "key": "items.json"}},
        **pool,
    )
    unreachable = closed_port_url()
    start_run(api, namespace, "unreachable", source={"http": {"url": unreachable}}, **pool)
    start_run(
        api,
        namespace,
        "half-routed",
        [{"id": f"r{n}", "to": "here" if n % 2 else "gone"} for n in range(6)],
        itemId="id",
        cap=2,
        checkoutTimeoutSeconds=2,
        routes={"field": "to", "pools": {"here": "p", "gone": "missing"}},
    )
    with SourceService(10, lambda n: {"id": f"s{n}"}, fail_after=3) as broken:
        start_run(
            api,
            namespace,
            "broken",
            itemId="id",
            source={"http": {"url": broken.url}},
            **pool,
        )
        status = finished_run(api, namespace, "broken", 60)
    assert status["phase"] == "Failed"
    assert f"http source {broken.url}" in status["message"]
    assert "HTTP 500" in status["message"]
    assert set(status["items"]) == {"s0", "s1", "s2"}
    assert condition(status, "Failed")["reason"] == "SourceFailed"

    status = finished_run(api, namespace, "twins")
    assert status["phase"] == "Failed"
    assert status["message"] == "1 of 3 items failed"
    assert status["items"] == {"a": {"id": "a"}, "b": {"id": "b"}}
    (key,) = status["failures"]
    assert status["failures"][key]["reason"] == "DuplicateId"
    assert "'a'" in status["failures"][key]["message"]
    assert "unique" in status["failures"][key]["message"]

    for name, words in (
        ("garbled", "configmap garbled key items.json is not a JSON array or JSON Lines"),
        ("unlisted", "configmap absent not found"),
        ("unreachable", f"http source {unreachable} unreachable"),
    ):
        status = finished_run(api, namespace, name, 60)
        assert status["phase"] == "Failed", name
        assert words in status["message"], status["message"]
        failed = condition(status, "Failed")
        assert (failed["status"], failed["reason"]) == ("True", "SourceFailed")
        assert words in failed["message"]

    status = finished_run(api, namespace, "half-routed", 60)
    assert (status["phase"], status["result"]) == ("Failed", "Deadlocked")
    assert 'AgentPool "missing" not found' in status["message"]
    assert "3 of 6 items could not start" in status["message"]
    assert set(status["items"]) == {"r1", "r3", "r5"}


def test_a_finished_run_is_deleted_after_its_ttl(api: Api, namespace: str) -> None:
    """ttlSecondsAfterFinished: the run is deleted that long after it ended."""
    api.create("agentpools", namespace, "p", pool_spec("echo", minSize=1))
    start_run(api, namespace, "brief", [1, 2, 3], poolRef={"name": "p"}, ttlSecondsAfterFinished=2)
    status = finished_run(api, namespace, "brief")
    assert status["phase"] == "Succeeded"
    assert api.exists("poolruns", namespace, "brief")
    wait_for(lambda: not api.exists("poolruns", namespace, "brief"), 30, message="run deleted")


def test_suspend_finishes_in_flight_items_and_resume_goes_on(
    api: Api, namespace: str, scratch: Path
) -> None:
    """Suspending a run lets its in-flight items finish and dispatches nothing more, while
    another run on the same pool goes on; resuming completes it, each item run exactly once, with
    the Suspended and Resumed Events."""
    record, gates = scratch / "invocations.jsonl", scratch / "gates"
    gates.mkdir()
    env = {"INVOCATIONS_FILE": str(record)}
    api.create("agentpools", namespace, "p", pool_spec("flaky", env=env, minSize=2))
    # Past the first four, each item waits for a gate file of its own, which the test creates
    # once the item has started: the run cannot drain before the suspend reaches the operator,
    # however late that is.
    items: list[dict[str, Any]] = [{"id": f"i{n:02}"} for n in range(20)]
    for item in items[4:]:
        item["waitFor"] = str(gates / item["id"])
    start_run(api, namespace, "paused", items, poolRef={"name": "p"}, itemId="id", cap=2)
    wait_for(lambda: run_status(api, namespace, "paused").get("succeeded", 0) >= 4, 60)
    api.patch_spec("poolruns", namespace, "paused", {"suspend": True})

    def suspended() -> dict[str, Any] | None:
        for started in invocations(record):  # what is in flight may finish
            (gates / started).touch()
        status = run_status(api, namespace, "paused")
        return status if status.get("phase") == "Suspended" else None

    status = wait_for(suspended, 30, message="run suspended")
    assert status["active"] == 0
    assert condition(status, "Suspended")["status"] == "True"
    done = status["succeeded"]
    assert 4 <= done < 20
    assert sum(map(len, invocations(record).values())) == done
    # Another run through the same pool marks time: the suspended run starts nothing meanwhile.
    start_run(api, namespace, "other", [{"id": f"o{n}"} for n in range(6)], poolRef={"name": "p"})
    assert finished_run(api, namespace, "other")["phase"] == "Succeeded"
    status = run_status(api, namespace, "paused")
    assert (status["phase"], status["succeeded"]) == ("Suspended", done)
    assert {key for key in invocations(record) if key.startswith("i")} == set(status["items"])
    # What the run read when it started cannot change under it: the API server says so.
    with pytest.raises(kubernetes.client.ApiException) as refused:
        api.patch_spec("poolruns", namespace, "paused", {"cap": 8})
    assert refused.value.status == 422
    assert "spec.cap cannot change once the run exists" in str(refused.value.body)
    for item in items:
        (gates / item["id"]).touch()
    api.patch_spec("poolruns", namespace, "paused", {"suspend": False})
    status = finished_run(api, namespace, "paused")
    assert (status["phase"], status["result"], status["succeeded"]) == ("Succeeded", "Drained", 20)
    assert condition(status, "Suspended")["status"] == "False"
    generation = api.get("poolruns", namespace, "paused")["metadata"]["generation"]
    assert status["observedGeneration"] == generation >= 3  # created, suspended, resumed
    calls = invocations(record)
    assert all(len(calls[item["id"]]) == 1 for item in items)
    # Events are posted in the background: the last may follow the status that ends the run.
    wait_for(
        lambda: {"Suspended", "Resumed"} <= set(api.event_reasons(namespace)),
        10,
        message="the Suspended and Resumed Events",
    )


def test_routes_send_each_item_to_the_pool_its_field_names(api: Api, namespace: str) -> None:
    """routes: researcher items go to one pool, coder items to another (their outputs say which
    agent served them), and an item whose value has no route fails with NoRoute."""
    api.create("agentpools", namespace, "research", pool_spec("echo", minSize=1))
    api.create("agentpools", namespace, "code", pool_spec("flaky", minSize=1))
    items = [
        {"id": "r1", "role": "researcher"},
        {"id": "c1", "role": "coder"},
        {"id": "r2", "role": "researcher"},
        {"id": "c2", "role": "coder"},
        {"id": "x", "role": "manager"},
    ]
    start_run(
        api,
        namespace,
        "mixed",
        items,
        itemId="id",
        cap=4,
        failures="Report",
        routes={"field": "role", "pools": {"researcher": "research", "coder": "code"}},
    )
    status = finished_run(api, namespace, "mixed")
    assert (status["phase"], status["result"]) == ("Succeeded", "Drained")
    for item in items[:4]:
        output = status["items"][item["id"]]
        if item["role"] == "researcher":
            assert output == item  # echo answers with the item itself
        else:
            assert output == {"id": item["id"], "attempt": 1, "item": item}  # flaky's answer
    assert status["failures"]["x"]["reason"] == "NoRoute"
    assert "'manager'" in status["failures"]["x"]["message"]


def test_agentpool_watch_exits_with_the_runs_outcome(
    api: Api, namespace: str, operator_cluster: Any
) -> None:
    """`agentpool watch RUN` shows progress until the run ends, then exits 0 for a run that
    succeeded and 1 for one that failed, printing the outcome's message."""
    api.create("agentpools", namespace, "p", pool_spec("flaky", minSize=2))
    connection = operator_cluster.connection
    items = [{"id": f"i{n}"} for n in range(10)]
    start_run(api, namespace, "good", items, poolRef={"name": "p"}, itemId="id", cap=2)
    bad = [*items, {"id": "boom", "fail": True}]
    start_run(api, namespace, "bad", bad, poolRef={"name": "p"}, itemId="id", cap=2)
    watches = {
        name: subprocess.Popen(
            [sys.executable, "-m", "agentpool", "watch", name, "-n", namespace, *connection],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("good", "bad")
    }
    outputs = {name: watch.communicate(timeout=90) for name, watch in watches.items()}
    assert watches["good"].returncode == 0, outputs["good"]
    assert watches["bad"].returncode == 1, outputs["bad"]
    good, bad_out = outputs["good"][0], outputs["bad"][0]
    assert "10/10" in good
    assert "Drained" in good
    assert "10 of 10 items succeeded" in good
    assert "11/11" in bad_out
    assert "1 of 11 items failed" in bad_out
    missing = agentpool_cli("watch", "nope", "-n", namespace, *connection)
    assert missing.returncode == 2
    assert 'poolrun "nope" not found' in missing.stderr
