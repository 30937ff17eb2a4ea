"""PoolRun on the local cluster: every acceptance point of the run engine, as a user sees it.

Each test drives the real operator (its own process) and the example agents through the public
surface: the kubernetes client, kubectl, and the ``agentpool`` command. Agents that record their
invocations (``INVOCATIONS_FILE``) let a test count exactly what ran, across operator restarts.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from operator_support import REPO, Api, pool_spec

from cluster import wait_for

FINISHED = ("Succeeded", "Failed")


def run_status(api: Api, namespace: str, name: str) -> dict[str, Any]:
    return api.status("poolruns", namespace, name)


def start_run(api: Api, namespace: str, name: str, items: Any = None, **spec: Any) -> None:
    """Create a PoolRun; ``items`` is the inline source unless ``spec`` names another."""
    if items is not None:
        spec["source"] = {"items": items}
    api.create("poolruns", namespace, name, spec)


def finished_run(api: Api, namespace: str, name: str, timeout: float = 90) -> dict[str, Any]:
    """The run's status once it has ended."""
    return wait_for(
        lambda: (s := run_status(api, namespace, name)).get("phase") in FINISHED and s,
        timeout,
        interval=0.1,
        message=f"run {name} finished",
    )


def ready_pool(api: Api, namespace: str, name: str, count: int, timeout: float = 60) -> None:
    wait_for(
        lambda: api.status("agentpools", namespace, name).get("readyReplicas", 0) >= count,
        timeout,
        message=f"{count} ready agents in pool {name}",
    )


def invocations(path: Path) -> dict[str, list[dict[str, Any]]]:
    """Every invocation the agents recorded, by item id, in the order they happened."""
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                found[record["id"]].append(record)
    return found


def condition(status: dict[str, Any], type: str) -> dict[str, Any]:
    return next(c for c in status.get("conditions", []) if c["type"] == type)


def agentpool_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The ``agentpool`` command, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "agentpool", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


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
    print(f"200 items at cap 8: {elapsed:.1f}s from create to Complete")


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
    assert "ItemFailed" in api.event_reasons(namespace)


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
    assert "Deadlocked" in api.event_reasons(namespace)


def test_a_killed_operator_resumes_without_running_a_recorded_item_again(
    api: Api, namespace: str, operator_cluster: Any, scratch: Path
) -> None:
    """SIGKILL the operator in the middle of 500 items: after a restart all 500 are recorded, no
    item recorded before the kill ran again, at most `cap` items ran twice (those in flight ran
    with their attempt raised), and the whole run cost at most 30 status writes."""
    cap = 25
    record = scratch / "invocations.jsonl"
    env = {"SLOW_START_SECONDS": "0", "WORK_SECONDS": "0.02", "INVOCATIONS_FILE": str(record)}
    api.create(
        "agentpools", namespace, "steady", pool_spec("slow_start", env=env, minSize=10, maxSize=10)
    )
    ready_pool(api, namespace, "steady", 10)
    items = [{"id": f"i{n:03}"} for n in range(500)]
    writes = ("patch", "poolruns/status")
    before = operator_cluster.handle.api_counts().get(writes, 0)
    start_run(api, namespace, "durable", items, poolRef={"name": "steady"}, itemId="id", cap=cap)

    def midway() -> bool:
        # Kill while agents hold items whose results are not written yet.
        done = run_status(api, namespace, "durable").get("succeeded", 0)
        return bool(done >= 150 and sum(map(len, invocations(record).values())) > done)

    wait_for(midway, 60, interval=0.01, message="150 items recorded and more running")
    operator_cluster.operator.kill()
    at_kill = run_status(api, namespace, "durable")
    unrecorded_calls = set(invocations(record)) - set(at_kill["items"])
    recorded = set(at_kill["items"])
    in_flight = set(at_kill.get("inFlight", {}))
    operator_cluster.operator.start()
    status = finished_run(api, namespace, "durable", 120)
    after = operator_cluster.handle.api_counts().get(writes, 0)
    assert (status["phase"], status["result"]) == ("Succeeded", "Drained")
    assert (status["succeeded"], status["failed"], status["total"]) == (500, 0, 500)
    assert set(status["items"]) == {item["id"] for item in items}
    assert 150 <= len(recorded) < 500, "the kill came in the middle of the run"
    seen = invocations(record)
    assert set(seen) == set(status["items"])
    assert all(len(seen[key]) == 1 for key in recorded), "a recorded item ran again"
    again = {key for key, calls in seen.items() if len(calls) > 1}
    assert len(again) <= cap, f"{len(again)} items ran again"
    assert all(len(seen[key]) == 2 for key in again)
    assert unrecorded_calls <= again, "an item in flight at the kill was not run again"
    for key in again & in_flight:
        assert seen[key][1]["attempt"] == at_kill["inFlight"][key] + 1
    assert after - before <= 30, f"{after - before} status writes"
    print(
        f"500 items, killed at {len(recorded)} recorded, {len(unrecorded_calls)} unrecorded "
        f"calls: {len(again)} ran again "
        f"({len(again & in_flight)} written as in flight), {after - before} status writes"
    )
