"""The operator's Prometheus metrics, defined once and served on ``--metrics-port``.

The pool controller sets the agent, waiter and Degraded gauges on every pass and counts the agents
it creates and retires, the run dispatcher times checkouts and items, the run daemon counts runs
by how they ended, and the Kubernetes API module counts writes. The chart's alerts and dashboard
query these names, and a chart test checks that each name they use is defined here. They live in
a registry of their own rather than the client library's default one, so that only these are
served; it is one per process, which is one operator in a cluster.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

REGISTRY = CollectorRegistry(auto_describe=True)

POOL_LABELS = ("namespace", "pool")
"""The labels of a pool's series."""
RUN_LABELS = ("namespace", "run")
"""The labels of a run's series."""

Family = TypeVar("Family", Counter, Gauge, Histogram)


def _family(
    kind: type[Family], name: str, documentation: str, labels: tuple[str, ...], **options: Any
) -> Family:
    """A metric family in the operator's registry, the only one served."""
    return kind(name, documentation, labels, registry=REGISTRY, **options)


AGENTS = _family(
    Gauge,
    "agentpool_agents",
    "Agents of a pool by state: idle, busy, starting, unready, retiring.",
    (*POOL_LABELS, "state"),
)
WAITERS = _family(
    Gauge, "agentpool_waiters", "Checkouts waiting for an agent of the pool.", POOL_LABELS
)
SLOTS = _family(
    Gauge,
    "agentpool_slots",
    "Slots of a pool's Ready agents (items they serve at once) by state: busy, free.",
    (*POOL_LABELS, "state"),
)
POOL_DEGRADED = _family(
    Gauge,
    "agentpool_pool_degraded",
    "1 while the pool's Degraded condition is True, else 0; reason is the condition's reason "
    "(ImagePullBackOff, CrashLoopBackOff, ReadinessFailing, ...; AsExpected when not Degraded). "
    "One series per pool.",
    (*POOL_LABELS, "reason"),
)
AGENTS_CREATED = _family(
    Counter, "agentpool_agents_created_total", "Agent pods the pool created.", POOL_LABELS
)
AGENTS_RETIRED = _family(
    Counter,
    "agentpool_agents_retired_total",
    "Agents the pool retired, by reason (Failed, Unready, IdleTimeout, MaxUses, ScaledDown, ...).",
    (*POOL_LABELS, "reason"),
)
CHECKOUT_SECONDS = _family(
    Histogram,
    "agentpool_checkout_seconds",
    "Time from asking for an agent to holding one; warm when an idle agent was there, "
    "scaleup when the checkout had to wait.",
    (*POOL_LABELS, "kind"),
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
CHECKOUT_TIMEOUTS = _family(
    Counter,
    "agentpool_checkout_timeouts_total",
    "Checkouts that found no agent within their timeout.",
    POOL_LABELS,
)
ITEMS = _family(
    Counter,
    "agentpool_items_total",
    "Item attempts by run and outcome (succeeded, failed).",
    (*RUN_LABELS, "outcome"),
)
ITEM_SECONDS = _family(
    Histogram,
    "agentpool_item_duration_seconds",
    "Time an agent took over one item attempt, as the operator measured the call.",
    RUN_LABELS,
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
RUNS_FINISHED = _family(
    Counter,
    "agentpool_runs_finished_total",
    "PoolRuns that ended, by phase (Succeeded, Failed) and the reason of their end (Drained, "
    "ItemsFailed, Deadlocked, SourceFailed, ...); no run label, as runs come and go.",
    ("namespace", "phase", "reason"),
)
RETRIES = _family(Counter, "agentpool_retries_total", "Item attempts beyond the first.", RUN_LABELS)
API_WRITES = _family(
    Counter,
    "agentpool_api_writes_total",
    "Writes the operator made to the Kubernetes API, by verb and resource.",
    ("verb", "resource"),
)
GATEWAY_REQUESTS = _family(
    Counter,
    "agentpool_gateway_requests_total",
    "Gateway calls and casts that reached a pool, by verb (call, cast) and outcome: OK, or the "
    "reason of the error answered (PoolExhausted, TooManyWaiters, HandlerError, CallTimeout, "
    "...).",
    (*POOL_LABELS, "verb", "outcome"),
)
GATEWAY_REFUSALS = _family(
    Counter,
    "agentpool_gateway_refusals_total",
    "Gateway requests refused before any pool was looked at, by verb and reason (Unauthorized, "
    "Forbidden, Invalid, TooLarge); no pool label, as the pool is the caller's word.",
    ("verb", "reason"),
)
GATEWAY_CHECKOUT_SECONDS = _family(
    Histogram,
    "agentpool_gateway_checkout_seconds",
    "Time a gateway call or cast waited in the pool's line for an agent.",
    (*POOL_LABELS, "verb"),
    buckets=(0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60),
)
GATEWAY_SECONDS = _family(
    Histogram,
    "agentpool_gateway_request_seconds",
    "Time from a gateway call or cast reaching its pool to its answer: the wait for an agent "
    "and, for a call, the agent's work.",
    (*POOL_LABELS, "verb"),
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
GATEWAY_WAITING = _family(
    Gauge,
    "agentpool_gateway_waiting",
    "Gateway calls and casts waiting in the pool's line now (agentpool_waiters counts every "
    "checkout waiting, runs' and leases' too).",
    POOL_LABELS,
)


#: How long the counts of a deleted run or pool stay served, so that a scrape still sees their
#: last values (gauges go at once: they would show what no longer is).
FORGET_AFTER_SECONDS = 300.0


def forget_pool_gauges(namespace: str, pool: str) -> None:
    """Drop a deleted pool's gauges: its agents and waiters are no more."""
    _DEGRADED_REASONS.pop((namespace, pool), None)
    for metric in (AGENTS, WAITERS, SLOTS, GATEWAY_WAITING, POOL_DEGRADED):
        metric.remove_by_labels({"namespace": namespace, "pool": pool})


def forget_pool_counts(namespace: str, pool: str) -> None:
    """Drop a deleted pool's counters and histograms, so they do not pile up."""
    for metric in (
        AGENTS_CREATED,
        AGENTS_RETIRED,
        CHECKOUT_SECONDS,
        CHECKOUT_TIMEOUTS,
        GATEWAY_REQUESTS,
        GATEWAY_CHECKOUT_SECONDS,
        GATEWAY_SECONDS,
    ):
        metric.remove_by_labels({"namespace": namespace, "pool": pool})


def forget_run(namespace: str, run: str) -> None:
    """Drop a deleted run's counters and histograms, so they do not pile up."""
    for metric in (ITEMS, ITEM_SECONDS, RETRIES):
        metric.remove_by_labels({"namespace": namespace, "run": run})


#: The reason each pool's Degraded series carries now, so a pass that changes nothing drops no
#: series: finding a pool's series among every pool's costs a scan of them all.
_DEGRADED_REASONS: dict[tuple[str, str], str] = {}


def set_pool_degraded(namespace: str, pool: str, *, degraded: bool, reason: str) -> None:
    """Set the pool's Degraded gauge to its condition now, dropping the series of the reason it
    had before, so that a pool has one series and a cleared reason stops alerting at once."""
    before = _DEGRADED_REASONS.get((namespace, pool))
    if before is not None and before != reason:
        with contextlib.suppress(KeyError):
            POOL_DEGRADED.remove(namespace, pool, before)
    _DEGRADED_REASONS[namespace, pool] = reason
    POOL_DEGRADED.labels(namespace, pool, reason).set(1 if degraded else 0)


def serve_metrics(port: int, host: str = "0.0.0.0") -> Callable[[], None]:
    """Serve ``/metrics`` on ``host`` (every IPv4 address by default) from a background thread;
    the function that stops serving."""
    server, thread = start_http_server(port, addr=host, registry=REGISTRY)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join()

    return stop
