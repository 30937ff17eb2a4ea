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
