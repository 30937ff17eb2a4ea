"""PoolRun on the local cluster: every acceptance point of the run engine, as a user sees it.

Each test drives the real operator (its own process) and the example agents through the public
surface: the kubernetes client, kubectl, and the ``agentpool`` command. Agents that record their
invocations (``INVOCATIONS_FILE``) let a test count exactly what ran, across operator restarts.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from aiohttp import web
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
    status = wait_for(
        lambda: (s := run_status(api, namespace, name)).get("phase") in FINISHED and s,
        timeout,
        interval=0.1,
        message=f"run {name} finished",
    )
    return dict(status)


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


class SourceService:
    """A source service on 127.0.0.1, in a thread of its own: ``POST /`` hands out ``count``
    items made by ``make_item(n)``, one per request, then ``{"done": true}``; after
    ``fail_after`` items it answers HTTP 500 instead, as a source that broke would."""

    def __init__(
        self, count: int, make_item: Callable[[int], Any], *, fail_after: int | None = None
    ) -> None:
        self.count = count
        self.make_item = make_item
        self.fail_after = fail_after
        self.handed = 0
        self.requests = 0
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    async def _answer(self, request: web.Request) -> web.Response:
        self.requests += 1
        await request.json()
        if self.fail_after is not None and self.handed >= self.fail_after:
            return web.json_response({"error": "the source broke"}, status=500)
        if self.handed >= self.count:
            return web.json_response({"done": True})
        self.handed += 1
        return web.json_response({"item": self.make_item(self.handed - 1)})

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/", self._answer)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}/"

    def __enter__(self) -> SourceService:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *_: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/"


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
    item recorded before the kill ran again, at most `cap` items ran twice (those in flight, with
    their attempt raised; those that had finished come back from the run's journal), and the
    whole run cost at most 30 status writes."""
    cap = 25
    record = scratch / "invocations.jsonl"
    env = {"SLOW_START_SECONDS": "0", "WORK_SECONDS": "0.04", "INVOCATIONS_FILE": str(record)}
    api.create(
        "agentpools", namespace, "steady", pool_spec("slow_start", env=env, minSize=10, maxSize=10)
    )
    ready_pool(api, namespace, "steady", 10)
    items = [{"id": f"i{n:03}"} for n in range(500)]
    writes = ("patch", "poolruns/status")
    before = operator_cluster.handle.api_counts().get(writes, 0)
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
    after = operator_cluster.handle.api_counts().get(writes, 0)
    assert (status["phase"], status["result"]) == ("Succeeded", "Drained")
    assert (status["succeeded"], status["failed"], status["total"]) == (500, 0, 500)
    assert set(status["items"]) == {item["id"] for item in items}
    assert 150 <= len(recorded) < 500, "the kill came in the middle of the run"
    assert len(unrecorded_calls) > cap, "items finished after the last write"
    seen = invocations(record)
    assert set(seen) == set(status["items"])
    assert all(len(seen[key]) == 1 for key in recorded), "a recorded item ran again"
    again = {key for key, calls in seen.items() if len(calls) > 1}
    assert len(again) <= cap, f"{len(again)} items ran again"
    assert all(len(seen[key]) == 2 for key in again)
    assert again <= unrecorded_calls, "only items not written at the kill may run again"
    for key in again:
        assert seen[key][1]["attempt"] == seen[key][0]["attempt"] + 1
    for key in again & in_flight:
        assert seen[key][1]["attempt"] == at_kill["inFlight"][key] + 1
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
    printed = agentpool_cli(
        "results", "bulk", "-n", namespace, "--server", operator_cluster.handle.url
    )
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
    """Inline items past the API server's 256 KiB limit on annotations: what the operator keeps
    on the run to notice `suspend` changes leaves the items out, so a suspend and a resume are
    handled without a refused write, and the run drains with every output recorded."""
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
    assert annotations, "the operator noted the handled suspend change"
    assert sum(len(k) + len(v) for k, v in annotations.items()) < 4096, list(annotations)
    assert "Too long" not in operator_cluster.operator.log()


def test_bad_items_and_sources_fail_clearly_and_lose_nothing_else(api: Api, namespace: str) -> None:
    """A duplicate id fails only that item; a ConfigMap that is not JSON, a missing ConfigMap,
    an unreachable source URL and a source that breaks mid-run fail the run with a message
    naming the source; a missing pool among routes deadlocks only its items. Every other item's
    output is kept."""
    api.create("agentpools", namespace, "p", pool_spec("echo", minSize=2))
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
    record = scratch / "invocations.jsonl"
    env = {"SLOW_START_SECONDS": "0", "WORK_SECONDS": "0.2", "INVOCATIONS_FILE": str(record)}
    api.create("agentpools", namespace, "p", pool_spec("slow_start", env=env, minSize=2))
    items = [{"id": f"i{n:02}"} for n in range(20)]
    start_run(api, namespace, "paused", items, poolRef={"name": "p"}, itemId="id", cap=2)
    wait_for(lambda: run_status(api, namespace, "paused").get("succeeded", 0) >= 4, 60)
    api.patch_spec("poolruns", namespace, "paused", {"suspend": True})
    status = wait_for(
        lambda: (s := run_status(api, namespace, "paused")).get("phase") == "Suspended" and s,
        30,
        message="run suspended",
    )
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
    api.patch_spec("poolruns", namespace, "paused", {"suspend": False})
    status = finished_run(api, namespace, "paused")
    assert (status["phase"], status["result"], status["succeeded"]) == ("Succeeded", "Drained", 20)
    assert condition(status, "Suspended")["status"] == "False"
    generation = api.get("poolruns", namespace, "paused")["metadata"]["generation"]
    assert status["observedGeneration"] == generation >= 3  # created, suspended, resumed
    calls = invocations(record)
    assert all(len(calls[item["id"]]) == 1 for item in items)
    reasons = api.event_reasons(namespace)
    assert "Suspended" in reasons
    assert "Resumed" in reasons


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
    server = operator_cluster.handle.url
    items = [{"id": f"i{n}"} for n in range(10)]
    start_run(api, namespace, "good", items, poolRef={"name": "p"}, itemId="id", cap=2)
    bad = [*items, {"id": "boom", "fail": True}]
    start_run(api, namespace, "bad", bad, poolRef={"name": "p"}, itemId="id", cap=2)
    watches = {
        name: subprocess.Popen(
            [sys.executable, "-m", "agentpool", "watch", name, "-n", namespace, "--server", server],
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
    missing = agentpool_cli("watch", "nope", "-n", namespace, "--server", server)
    assert missing.returncode == 2
    assert 'poolrun "nope" not found' in missing.stderr


def test_items_in_flight_at_a_kill_run_again_with_their_attempt_raised(
    api: Api, namespace: str, operator_cluster: Any, scratch: Path
) -> None:
    """Items longer than the status interval are written as in flight; after a SIGKILL of the
    operator each runs again with its attempt raised, and every item is recorded once."""
    record = scratch / "invocations.jsonl"
    env = {"SLOW_START_SECONDS": "0", "WORK_SECONDS": "2", "INVOCATIONS_FILE": str(record)}
    api.create("agentpools", namespace, "long", pool_spec("slow_start", env=env, minSize=3))
    ready_pool(api, namespace, "long", 3)
    items = [{"id": f"i{n}"} for n in range(6)]
    start_run(api, namespace, "lengthy", items, poolRef={"name": "long"}, itemId="id", cap=3)
    at_kill = wait_for(
        lambda: len((s := run_status(api, namespace, "lengthy")).get("inFlight") or {}) == 3 and s,
        30,
        message="three items written as in flight",
    )
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
