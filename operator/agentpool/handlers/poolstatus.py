"""The AgentPool status: what the pool reconciler reports after each pass, and its metrics.

:func:`write_status` turns the broker's view of the pool into `status` (counts, state, sizing
advice, conditions, with the Degraded causes the reconciler remembers), coalesces writes to at
most one a second, and skips a write that would change nothing. Called by
:mod:`agentpool.handlers.pools` at the end of every pass.
"""

from __future__ import annotations

from typing import Any

from agentpool import metrics
from agentpool.api import AgentPoolStatus
from agentpool.api.conditions import merge_conditions, now_time
from agentpool.api.reasons import ConditionType, Reason
from agentpool.handlers.runtime import PoolHandle, Runtime
from agentpool.io.kube import NotFound
from agentpool.pool import ConditionView, DemandSample, PoolPolicy, compute_status
from agentpool.pool.manifests import pool_selector
from agentpool.pool.status import start_failure_condition

#: Status writes of one pool are coalesced to at most one per this many seconds.
STATUS_INTERVAL_SECONDS = 1.0
#: Demand is sampled for the sizing recommendation this often, over this window.
SAMPLE_SECONDS = 10.0
SAMPLE_WINDOW_SECONDS = 3600.0
#: A scheduled pod not Ready this long after creation counts as failing its readiness probe.
READINESS_GRACE_SECONDS = 300.0
#: How long an agent that turned unready keeps the pool Degraded after it was replaced.
UNREADY_MEMORY_SECONDS = 60.0


async def write_status(
    runtime: Runtime, handle: PoolHandle, pool: dict[str, Any], policy: PoolPolicy, now: float
) -> None:
    if not handle.history or now - handle.history[-1].at >= SAMPLE_SECONDS:
        counts = handle.broker.counts()
        handle.history.append(DemandSample(at=now, busy=counts["busy"], waiting=counts["waiting"]))
        handle.history = [s for s in handle.history if now - s.at <= SAMPLE_WINDOW_SECONDS]
    view = compute_status(
        policy,
        handle.broker.agents(),
        handle.broker.waiters(),
        now,
        history=handle.history,
        window_seconds=SAMPLE_WINDOW_SECONDS,
        readiness_grace_seconds=READINESS_GRACE_SECONDS,
    )
    record_metrics(handle, view.waiting)
    previous = pool.get("status") or {}
    generation = pool["metadata"].get("generation")
    status = AgentPoolStatus.model_validate(
        {
            "replicas": view.replicas,
            "readyReplicas": view.ready_replicas,
            "available": view.available,
            "busy": view.busy,
            "overflow": view.overflow,
            "maxSize": policy.max_size,
            "waiting": view.waiting,
            "state": view.state,
            "selector": pool_selector(handle.name),
            "observedGeneration": generation,
            "recommendation": (
                {"minSize": view.recommendation.min_size, "maxSize": view.recommendation.max_size}
                if view.recommendation
                else None
            ),
            "coldStartSeconds": (
                round(view.cold_start_seconds, 3) if view.cold_start_seconds is not None else None
            ),
        }
    ).model_dump(by_alias=True, exclude_none=True, mode="json")
    conditions = list(view.conditions)
    trouble = None
    if handle.crash_failures and handle.start_failures:
        trouble = start_failure_condition(handle.start_failures, count=handle.crash_failures)
    elif handle.last_unready and now - handle.last_unready[1] < UNREADY_MEMORY_SECONDS:
        # An agent that turns unready is retired in the same pass; remember it for a while so
        # Degraded says so instead of flipping back before anyone can see it.
        message = f"agent {handle.last_unready[0]} stopped passing its readiness probe"
        trouble = ConditionView(
            str(ConditionType.DEGRADED), "True", str(Reason.READINESS_FAILING), message
        )
    if trouble is not None:
        conditions = [
            trouble if cond.type == ConditionType.DEGRADED and cond.status != "True" else cond
            for cond in conditions
        ]
    status["conditions"] = merge_conditions(
        previous.get("conditions"), conditions, generation=generation, now=now_time()
    )
    if status == handle.last_status:
        return
    since = now - handle.last_status_at
    if since < STATUS_INTERVAL_SECONDS:
        # Coalesce: the next pass (woken by then at the latest) writes the newest status.
        handle.wake_at(STATUS_INTERVAL_SECONDS - since)
        return
    try:
        await runtime.kube.patch_status("agentpools", handle.namespace, handle.name, status)
    except NotFound:
        return
    handle.last_status = status
    handle.last_status_at = now


def record_metrics(handle: PoolHandle, waiting: int) -> None:
    states = dict.fromkeys(AGENT_STATES, 0)
    for agent in handle.broker.agents():
        if agent.name in handle.kept:  # a failed pod kept to look at, no longer an agent
            continue
        if agent.deleting:
            states["retiring"] += 1
        elif agent.busy:
            states["busy"] += 1
        elif agent.idle:
            states["idle"] += 1
        elif agent.pending:
            states["starting"] += 1
        else:
            states["unready"] += 1
    for state, count in states.items():
        metrics.AGENTS.labels(handle.namespace, handle.name, state).set(count)
    metrics.WAITERS.labels(handle.namespace, handle.name).set(waiting)


AGENT_STATES = ("idle", "busy", "starting", "unready", "retiring")
