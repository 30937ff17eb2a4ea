"""What a PoolRun's status says while it runs, on the local cluster and a real one: counts that
mean what they say, and conditions that name what the run waits for.

Each test drives the real operator (its own process) and the example agents, and reads the run
through the API as a user's program or kubectl would.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from operator_support import Api, pool_spec
from run_support import (
    SourceService,
    agentpool_cli,
    condition,
    finished_run,
    ready_pool,
    run_status,
    start_run,
)

from agentpool.client.sync import Client
from cluster import Kubectl, wait_for
from docblocks import REPO, block_for, namespaced_kubeconfig, run_shell_block


def test_items_waiting_for_a_retry_are_counted_apart_from_those_in_flight(
    api: Api, namespace: str, kubectl_op: Any
) -> None:
    """Six items at cap 2 each fail their first attempt and wait 10 s for the next: status
    counts the six in `retrying` and names them in `awaitingRetry`, never more than cap as
    `active` or in `inFlight`, and `kubectl get -o wide` shows the RETRYING column."""
    api.create("agentpools", namespace, "flaky", pool_spec("flaky", minSize=2))
    ready_pool(api, namespace, "flaky", 2)
    items = [{"id": f"r{n}", "failTimes": 1} for n in range(6)]
    start_run(
        api,
        namespace,
        "patient",
        items,
        poolRef={"name": "flaky"},
        itemId="id",
        cap=2,
        maxAttempts=2,
        backoffSeconds=10,
    )
    seen: list[dict[str, Any]] = []

    def all_waiting() -> dict[str, Any] | None:
        status = run_status(api, namespace, "patient")
        seen.append(status)
        return status if status.get("retrying") == 6 else None

    waiting = wait_for(all_waiting, 60, interval=0.1, message="six items waiting for a retry")
    assert waiting["awaitingRetry"] == {item["id"]: 1 for item in items}
    assert waiting["active"] == 0
    table = kubectl_op("get", "poolrun", "patient", "-n", namespace, "-o", "wide").stdout
    header, row = table.splitlines()[:2]
    # Columns are aligned, and empty cells print as nothing: read the cell under its title.
    column = header.index("RETRYING")
    assert row[column:].split()[0] == "6", table
    status = finished_run(api, namespace, "patient", 90)
    assert (status["phase"], status["succeeded"], status["retries"]) == ("Succeeded", 6, 6)
    assert (status["retrying"], status["active"]) == (0, 0)
    assert status.get("awaitingRetry", {}) == {}
    for observed in seen:
        assert observed.get("active", 0) <= 2, observed
        assert len(observed.get("inFlight", {})) <= 2, observed


def waiting(status: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == "Waiting"), {})


def test_a_run_whose_pool_does_not_exist_says_so_until_it_is_created(
    api: Api, namespace: str
) -> None:
    """A run created before its pool says at once, long before its checkout timeout, that it
    waits for the pool: condition Waiting, reason PoolNotFound, a message naming the pool and
    its namespace, set from the run's generation. Once the pool is created the condition turns
    False and the run drains."""
    start_run(
        api,
        namespace,
        "early",
        [{"id": f"e{n}"} for n in range(4)],
        poolRef={"name": "later"},
        itemId="id",
        cap=2,
        checkoutTimeoutSeconds=300,
    )
    status = wait_for(
        lambda: (
            (s := run_status(api, namespace, "early")) and waiting(s).get("status") == "True" and s
        ),
        60,
        interval=0.2,
        message="the run says it waits for its pool",
    )
    found = waiting(status)
    assert status["phase"] == "Running"
    assert found["reason"] == "PoolNotFound"
    assert f'AgentPool "later" not found in namespace "{namespace}"' in found["message"]
    assert "so far" in found["message"]
    assert status["message"] == found["message"]
    generation = api.get("poolruns", namespace, "early")["metadata"]["generation"]
    assert found["observedGeneration"] == generation
    assert found["lastTransitionTime"]
    api.create("agentpools", namespace, "later", pool_spec("echo", minSize=2))
    status = finished_run(api, namespace, "early", 120)
    assert (status["phase"], status["result"], status["succeeded"]) == ("Succeeded", "Drained", 4)
    assert waiting(status)["status"] == "False"
    assert condition(status, "Complete")["observedGeneration"] == generation


def test_a_source_that_does_not_answer_is_named_while_the_run_waits(
    api: Api, namespace: str
) -> None:
    """A source service that does not answer: the run is Running at once with condition
    Waiting, reason SourcePending, and a message naming the source's URL, rather than showing
    nothing until the source's requests time out; once it answers, the run drains."""
    api.create("agentpools", namespace, "steady", pool_spec("echo", minSize=2))
    ready_pool(api, namespace, "steady", 2)
    hold = threading.Event()
    with SourceService(3, lambda n: {"id": f"s{n}"}, hold=hold) as source:
        try:
            start_run(
                api,
                namespace,
                "patient",
                poolRef={"name": "steady"},
                source={"http": {"url": source.url}},
                itemId="id",
            )
            status = wait_for(
                lambda: (
                    (s := run_status(api, namespace, "patient"))
                    and waiting(s).get("status") == "True"
                    and s
                ),
                25,
                interval=0.2,
                message="the run says it waits for its source",
            )
        finally:
            hold.set()
        found = waiting(status)
        assert status["phase"] == "Running"
        assert found["reason"] == "SourcePending"
        assert f"http source {source.url} has not answered yet" in found["message"]
        status = finished_run(api, namespace, "patient", 60)
    assert (status["phase"], status["succeeded"]) == ("Succeeded", 3)
    assert waiting(status)["status"] == "False"


def test_outputs_holding_nulls_are_read_back_exactly_as_the_agent_answered(
    api: Api, namespace: str, operator_cluster: Any
) -> None:
    """An agent answers outputs with null values ({"answer": 1, "lease": null}, null itself, a
    null deep inside): status is written as a merge patch, where null deletes, yet `agentpool
    results` and the Python client both read every output back with its null keys."""
    api.create("agentpools", namespace, "p", pool_spec("echo", minSize=1, maxSize=1))
    ready_pool(api, namespace, "p", 1)
    items = [{"answer": 1, "lease": None}, None, {"deep": {"x": None, "y": [None, {"z": None}]}}]
    expected = {str(n): item for n, item in enumerate(items)}
    start_run(api, namespace, "nulls", items, poolRef={"name": "p"})
    status = finished_run(api, namespace, "nulls")
    assert (status["phase"], status["succeeded"], status["total"]) == ("Succeeded", 3, 3)
    printed = agentpool_cli("results", "nulls", "-n", namespace, *operator_cluster.connection)
    assert printed.returncode == 0, printed.stderr
    records = [json.loads(line) for line in printed.stdout.splitlines()]
    assert {record["id"]: record["output"] for record in records} == expected
    handle = operator_cluster.handle
    with Client.from_kubeconfig(handle.kubeconfig, handle.context, namespace=namespace) as client:
        read = {result.id: result.output for result in client.run("nulls").results()}
    assert read == expected


def test_kubectl_waits_for_either_end_of_a_run(
    api: Api, namespace: str, kubectl_op: Kubectl, tmp_path: Path
) -> None:
    """The install guide's wait, run as printed against a run that fails (failures: Fail, one
    item failing), returns with phase Failed, where `--for=condition=Complete` would wait
    until its timeout; and kubectl shows RESULT Drained beside PHASE Failed, as the guide says."""
    api.create("agentpools", namespace, "quickstart", pool_spec("flaky", minSize=1))
    ready_pool(api, namespace, "quickstart", 1)
    items = [{"id": "ok"}, {"id": "bad", "fail": True}]
    start_run(api, namespace, "quickstart", items, poolRef={"name": "quickstart"}, itemId="id")
    kubeconfig = namespaced_kubeconfig(
        kubectl_op.kubeconfig, kubectl_op.context, namespace, tmp_path / "kubeconfig"
    )
    block = block_for(
        "tests/integration/test_runs_status.py::test_kubectl_waits_for_either_end_of_a_run",
        REPO / "docs" / "guides" / "install.md",
    )
    done = run_shell_block(
        block,
        kubeconfig=kubeconfig,
        bindir=Path(kubectl_op.binary).parent,
        cwd=tmp_path,
        timeout=360,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("Failed"), done.stdout
    status = run_status(api, namespace, "quickstart")
    assert (status["phase"], status["result"]) == ("Failed", "Drained")
    assert condition(status, "Failed")["reason"] == "ItemsFailed"
    table = kubectl_op("get", "poolrun", "quickstart", "-n", namespace).stdout
    header, row = table.splitlines()[:2]
    assert row[header.index("PHASE") :].split()[0] == "Failed", table
    assert row[header.index("RESULT") :].split()[0] == "Drained", table
