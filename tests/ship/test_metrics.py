"""``/metrics`` of a running operator, read over HTTP after a scenario, says what happened.

The operator ran in its own process with ``--metrics-port``; each test reads one part of the
scrape and compares it with what the scenario did and with the objects' status.
"""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from agentpool import metrics
from ship.scenario import ITEMS, Outcome

pytestmark = pytest.mark.local_only(
    "the scenario starts a local cluster of its own behind a recording proxy, which the local "
    "pass runs; on a real cluster the Helm test proves the chart's RBAC"
)


def test_every_metric_family_is_served(operator_outcome: Outcome) -> None:
    """Each metric the operator defines is in the scrape."""
    defined = {family.name for family in metrics.REGISTRY.collect()}
    assert defined <= set(operator_outcome.metrics), operator_outcome.metrics.keys()


def test_items_counted_by_run_and_outcome(operator_outcome: Outcome) -> None:
    """Every item of the main run is one successful attempt, timed once, as its status says."""
    run = operator_outcome.main_run
    assert (run["phase"], run.get("succeeded"), run.get("failed")) == ("Succeeded", ITEMS, 0)
    total = operator_outcome.total
    assert total("agentpool_items_total", run="main", outcome="succeeded") == ITEMS
    assert total("agentpool_items_total", run="main", outcome="failed") == 0
    assert total("agentpool_item_duration_seconds_count", run="main") == ITEMS
    assert 0 < total("agentpool_item_duration_seconds_sum", run="main") < 30 * ITEMS


def test_retries_counted(operator_outcome: Outcome) -> None:
    """The item that failed once and then succeeded shows one retry and both attempts."""
    total = operator_outcome.total
    assert total("agentpool_retries_total", run="retried") == 1
    assert total("agentpool_items_total", run="retried", outcome="failed") == 1
    assert total("agentpool_items_total", run="retried", outcome="succeeded") == 1


def test_checkouts_timed_warm_and_after_scale_up(operator_outcome: Outcome) -> None:
    """Each item's checkout is in the histogram; with cap above minSize some had to wait."""
    total = operator_outcome.total
    assert total("agentpool_checkout_seconds_count", pool="echo") >= ITEMS
    assert total("agentpool_checkout_seconds_count", pool="echo", kind="warm") >= 1
    assert total("agentpool_checkout_seconds_count", pool="echo", kind="scaleup") >= 1


def test_checkout_timeouts_counted(operator_outcome: Outcome) -> None:
    """A run on a pool that never becomes Ready deadlocks, and its timed-out checkout is counted."""
    stuck = operator_outcome.stuck_run
    assert (stuck["phase"], stuck.get("result")) == ("Failed", "Deadlocked")
    assert operator_outcome.total("agentpool_checkout_timeouts_total", pool="cold") >= 1


def test_agent_and_waiter_gauges_match_pool_status(operator_outcome: Outcome) -> None:
    """Agents by state add up to the pool's replicas, idle and busy to its ready agents, and the
    waiters gauge is the status' waiting count."""
    pool = operator_outcome.pool
    total = operator_outcome.total
    assert total("agentpool_agents", pool="echo") == pool["replicas"] == 1
    ready = total("agentpool_agents", pool="echo", state="idle") + total(
        "agentpool_agents", pool="echo", state="busy"
    )
    assert ready == pool["readyReplicas"]
    assert total("agentpool_waiters", pool="echo") == pool.get("waiting", 0) == 0


def test_api_writes_are_counted_and_batched(operator_outcome: Outcome) -> None:
    """Writes are counted by verb and resource; each counted write is a request the API server
    got; and run status is written about once per item at most."""
    writes = operator_outcome.samples("agentpool_api_writes_total")
    assert writes, "no API writes were counted"
    for sample in writes:
        verb, resource = sample.labels["verb"], sample.labels["resource"]
        accesses = operator_outcome.accesses.items()
        sent = sum(n for a, n in accesses if (a.verb, a.resource) == (verb, resource))
        assert sample.value <= sent, f"{verb} {resource}: {sample.value} counted, {sent} sent"
    total = operator_outcome.total
    # Two echo agents, one overflow agent, one flaky, one cold.
    assert total("agentpool_api_writes_total", verb="create", resource="pods") >= 5
    status_writes = total("agentpool_api_writes_total", verb="patch", resource="poolruns/status")
    # This operator has no state directory, so each start is written in flight before it begins
    # (a crash then runs it again with its attempt raised): about one write per item, never more.
    assert 0 < status_writes < 2 * ITEMS


def test_a_deleted_run_or_pool_leaves_no_series_behind() -> None:
    """Series of a deleted run or pool are dropped; those of others stay."""
    metrics.ITEMS.labels("forget-ns", "gone", "succeeded").inc()
    metrics.ITEMS.labels("forget-ns", "kept", "succeeded").inc()
    metrics.ITEM_SECONDS.labels("forget-ns", "gone").observe(0.1)
    metrics.AGENTS.labels("forget-ns", "gone-pool", "idle").set(2)
    metrics.CHECKOUT_SECONDS.labels("forget-ns", "gone-pool", "warm").observe(0.001)
    metrics.forget_run("forget-ns", "gone")
    metrics.forget_pool_gauges("forget-ns", "gone-pool")
    metrics.forget_pool_counts("forget-ns", "gone-pool")
    text = generate_latest(metrics.REGISTRY).decode()
    assert 'run="gone"' not in text
    assert 'pool="gone-pool"' not in text
    assert 'run="kept"' in text


def test_gateway_calls_counted_by_outcome_and_timed(operator_outcome: Outcome) -> None:
    """The scenario's call and cast through the gateway are counted OK and timed against their
    pool; the call with a bad token is counted refused, with no pool named."""
    assert operator_outcome.gateway == {"call": 200, "cast": 202, "refused": 401}
    total = operator_outcome.total
    for verb in ("call", "cast"):
        assert total("agentpool_gateway_requests_total", pool="echo", verb=verb, outcome="OK") == 1
        assert total("agentpool_gateway_request_seconds_count", pool="echo", verb=verb) == 1
        assert total("agentpool_gateway_checkout_seconds_count", pool="echo", verb=verb) == 1
    refused = operator_outcome.samples("agentpool_gateway_refusals_total", reason="Unauthorized")
    assert [sample.value for sample in refused] == [1.0]
    assert "pool" not in refused[0].labels


def test_runs_counted_by_how_they_ended(operator_outcome: Outcome) -> None:
    """The main and retried runs ended Succeeded (Drained) and the stuck one Failed
    (Deadlocked), each counted once in its namespace: what the failed-runs alert reads."""
    total = operator_outcome.total
    ended = "agentpool_runs_finished_total"
    assert total(ended, namespace="ship", phase="Succeeded", reason="Drained") == 2
    assert total(ended, namespace="ship", phase="Failed", reason="Deadlocked") == 1
    assert total(ended, phase="Failed") == 1


def test_agent_churn_adds_up_to_the_pool(operator_outcome: Outcome) -> None:
    """The echo pool grew to serve the run and was scaled down to one agent: the agents it
    created less those it retired are the agents it has."""
    total = operator_outcome.total
    created = total("agentpool_agents_created_total", pool="echo")
    retired = total("agentpool_agents_retired_total", pool="echo")
    assert created >= 2
    assert retired >= 1
    assert created - retired == operator_outcome.pool["replicas"]


def test_a_healthy_pool_is_not_degraded(operator_outcome: Outcome) -> None:
    """The echo pool's agents all serve, so its one Degraded series is 0, as its status says."""
    pool = operator_outcome.pool
    degraded = operator_outcome.samples("agentpool_pool_degraded", pool="echo")
    assert [(s.labels["reason"], s.value) for s in degraded] == [("AsExpected", 0.0)]
    (condition,) = (c for c in pool.get("conditions", []) if c["type"] == "Degraded")
    assert (condition["status"], condition["reason"]) == ("False", "AsExpected")
