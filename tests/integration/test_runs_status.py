"""What a PoolRun's status says while it runs, on the local cluster and a real one: counts that
mean what they say, and conditions that name what the run waits for.

Each test drives the real operator (its own process) and the example agents, and reads the run
through the API as a user's program or kubectl would.
"""

from __future__ import annotations

from typing import Any

from operator_support import Api, pool_spec
from run_support import finished_run, ready_pool, run_status, start_run

from cluster import wait_for


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
    assert "RETRYING" in header.split()
    assert row.split()[header.split().index("RETRYING")] == "6"
    status = finished_run(api, namespace, "patient", 90)
    assert (status["phase"], status["succeeded"], status["retries"]) == ("Succeeded", 6, 6)
    assert (status["retrying"], status["active"]) == (0, 0)
    assert status.get("awaitingRetry", {}) == {}
    for observed in seen:
        assert observed.get("active", 0) <= 2, observed
        assert len(observed.get("inFlight", {})) <= 2, observed
