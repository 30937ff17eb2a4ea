"""A pool whose agents answer outside the agent protocol says so, rather than staying healthy
while every item fails.

The pool runs ``tests/integration/agents/webpage.py``: a web server that passes the readiness
probe on ``/healthz`` but answers ``POST /invoke`` with an HTML 404 page, as a container serving
something else on ``spec.port`` does.
"""

from __future__ import annotations

from typing import Any

import pytest
from operator_support import Api
from pool_support import pool_status
from run_support import finished_run, start_run

from cluster import wait_for

pytestmark = [pytest.mark.cluster]

WEBPAGE = ["python", "tests/integration/agents/webpage.py"]
ITEMS = 10


def degraded(status: dict[str, Any]) -> dict[str, Any] | None:
    found = next((c for c in status.get("conditions", []) if c["type"] == "Degraded"), None)
    return dict(found) if found is not None and found["status"] == "True" else None


def test_a_pool_answering_outside_the_protocol_is_degraded(api: Api, namespace: str) -> None:
    """Ten items on two agents that answer ``POST /invoke`` with a 404 page each fail as
    BadResponse, their message naming the request and the protocol's page; the pool, healthy
    while its agents only passed their probes, is Degraded OutsideProtocol within those ten
    failed items (no other item runs), its message saying the agents do not speak the protocol
    and what to check. Quarantine retires neither agent: they fail alike."""
    template = {"spec": {"containers": [{"name": "agent", "command": WEBPAGE}]}}
    api.create(
        "agentpools",
        namespace,
        "web",
        {"image": "agentpool:0.1.0", "template": template, "minSize": 2},
    )
    ready = wait_for(
        lambda: (s := pool_status(api, namespace, "web")).get("available") == 2 and s,
        90,
        message="two webpage agents available",
    )
    assert degraded(ready) is None, "the pool is unhealthy before any item ran"

    start_run(
        api, namespace, "r", list(range(ITEMS)), poolRef={"name": "web"}, cap=2, failures="Report"
    )
    run = finished_run(api, namespace, "r")
    assert run["failed"] == ITEMS
    for failure in run["failures"].values():
        assert failure["reason"] == "BadResponse"
        assert "answered POST /invoke with HTTP 404" in failure["message"]
        assert "see the agent protocol: docs/reference/protocol.md" in failure["message"]

    condition = wait_for(
        lambda: degraded(pool_status(api, namespace, "web")),
        30,
        message="pool web Degraded",
    )
    assert condition["reason"] == "OutsideProtocol"
    assert "outside the agent protocol" in condition["message"]
    assert "POST /invoke" in condition["message"]
    assert "spec.port" in condition["message"]
    assert pool_status(api, namespace, "web").get("replicas") == 2
