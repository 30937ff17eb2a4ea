"""The AgentPool status: what the pool reconciler reports after each pass, and its metrics.

:func:`write_status` turns the broker's view of the pool into `status` (counts, state, sizing
advice, conditions, with the Degraded causes the reconciler remembers and agents whose readiness
probe keeps failing), coalesces writes to at most one a second, and skips a write that would
change nothing. Called by :mod:`agentpool.handlers.pools` at the end of every pass.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from agentpool import metrics
from agentpool.api.base import SpecError
from agentpool.api.conditions import ConditionView, merge_conditions, now_time
from agentpool.api.raw import RawBody
from agentpool.api.reasons import ConditionType, Reason
from agentpool.handlers.failures import health_ahead
from agentpool.handlers.runtime import PoolHandle, Runtime
from agentpool.io.kube import ObjectNotFound
from agentpool.pool import ObservedAgent, PoolPolicy, compute_status
from agentpool.pool.health import degraded_trouble, with_trouble
from agentpool.pool.manifests import pool_selector
from agentpool.pool.plan import waiting_slots
from agentpool.pool.probing import (
    UNHEALTHY_EVENTS,
    events_due,
    failing_agents,
    last_probe_error,
    probe_errors,
    probe_failure_condition,
    probe_threshold,
    with_probe_failures,
)
from agentpool.pool.report import agent_states, sample_demand, status_body, write_delay
from agentpool.pool.rollout import restored_mark, track_progress
from agentpool.pool.status import cold_start_seconds

log = logging.getLogger(__name__)


async def report_invalid_spec(runtime: Runtime, pool: RawBody, error: SpecError) -> None:
    """Mark a pool whose spec does not validate: Ready False, reason InvalidSpec, the message
    naming each bad field. The CRD schema cannot check everything (a cron expression, a time
    zone), so such a spec can reach the operator."""
    meta = pool["metadata"]
    generation = meta.get("generation")
    conditions = merge_conditions(
        (pool.get("status") or {}).get("conditions"),
        [
            ConditionView(
                type=ConditionType.READY,
                status="False",
                reason=Reason.INVALID_SPEC,
                message=f"{error}. Fix the spec; the pool keeps its agents as they are until then.",
            )
        ],
        generation=generation,
        now=now_time(),
    )
    with contextlib.suppress(ObjectNotFound):
        await runtime.kube.patch_status(
            "agentpools",
            meta.get("namespace") or "",
            meta["name"],
            {"conditions": conditions, "observedGeneration": generation},
        )


async def write_status(
    runtime: Runtime,
    handle: PoolHandle,
    pool: RawBody,
    policy: PoolPolicy,
    now: float,
    *,
    open_schedules: Sequence[str] = (),
) -> dict[str, Any]:
    """Report the pass: the status the pool core computes, with the Degraded causes the pool
    remembers, written when it changed and at most once a second; and the pool's gauges.
    Returns the status as computed, written or not."""
    await learn_probe_errors(runtime, handle, policy, now)
    status = current_status(handle, pool, policy, now, open_schedules=open_schedules)
    delay = write_delay(
        status,
        last=handle.last_status,
        since_last=now - handle.last_status_at,
        interval=handle.settings.status_interval_seconds,
    )
    if delay is None:
        return status
    if delay > 0:
        # Coalesce: the next pass (woken by then at the latest) writes the newest status.
        handle.wake_at(delay)
        return status
    try:
        await runtime.kube.patch_status("agentpools", handle.namespace, handle.name, status)
    except ObjectNotFound:
        return status
    handle.last_status = status
    handle.last_status_at = now
    return status


def current_status(
    handle: PoolHandle,
    pool: RawBody,
    policy: PoolPolicy,
    now: float,
    *,
    open_schedules: Sequence[str] = (),
) -> dict[str, Any]:
    """The pool's status as of ``now``, its conditions stamped; samples demand and sets the
    pool's gauges on the way."""
    sample(handle, policy, now)
    agents = handle.broker.agents()
    if handle.rollout is None:
        stored = (pool.get("status") or {}).get("conditions")
        handle.rollout = restored_mark(stored, policy, agents, now)
    handle.rollout = track_progress(handle.rollout, policy, agents, now)
    view = compute_status(
        policy,
        agents,
        handle.broker.waiters(),
        now,
        history=handle.history,
        window_seconds=handle.settings.sample_window_seconds,
        rollout=handle.rollout,
    )
    record_metrics(handle, view.waiting, slots=view.slots, busy_slots=view.busy_slots)
    generation = pool["metadata"].get("generation")
    status = status_body(
        view,
        policy,
        selector=pool_selector(handle.name),
        generation=generation,
        open_schedules=open_schedules,
    )
    conditions = troubled(view.conditions, handle, policy, agents, now)
    record_degraded(handle, conditions)
    status["conditions"] = merge_conditions(
        (pool.get("status") or {}).get("conditions"),
        conditions,
        generation=generation,
        now=now_time(),
    )
    return status


def remembered_trouble(
    handle: PoolHandle, agents: Sequence[ObservedAgent], now: float
) -> ConditionView | None:
    """The Degraded condition the pool's memory of its agents' troubles calls for, if any."""
    settings = handle.settings
    return degraded_trouble(
        health_ahead(handle, agents, now),
        now,
        memory_seconds=settings.unready_memory_seconds,
        outside_threshold=settings.outside_protocol_answers,
        outside_memory_seconds=settings.outside_protocol_memory_seconds,
    )


def troubled(
    conditions: Sequence[ConditionView],
    handle: PoolHandle,
    policy: PoolPolicy,
    agents: Sequence[ObservedAgent],
    now: float,
) -> Sequence[ConditionView]:
    """The conditions with the Degraded causes the pool remembers, then those of agents whose
    readiness probe keeps failing."""
    remembered = remembered_trouble(handle, agents, now)
    return probe_failures(with_trouble(conditions, remembered), handle, policy, agents, now)


def past_probe_threshold(
    handle: PoolHandle, policy: PoolPolicy, agents: Sequence[ObservedAgent], now: float
) -> tuple[float, list[ObservedAgent]]:
    """How long the pool's agents may run without turning Ready before it says so, and the
    agents that have run longer."""
    threshold = probe_threshold(
        cold_start_seconds(agents),
        deadline=policy.progress_deadline_seconds,
        floor=handle.settings.probe_failure_seconds,
    )
    return threshold, failing_agents(agents, now=now, threshold=threshold)


async def learn_probe_errors(
    runtime: Runtime, handle: PoolHandle, policy: PoolPolicy, now: float
) -> None:
    """While some agent runs past the probe threshold without turning Ready, read its probe's
    last error from the namespace's Unhealthy Events, at most every few seconds; forget them
    once none does."""
    _, failing = past_probe_threshold(handle, policy, handle.broker.agents(), now)
    if not failing:
        handle.probe_errors, handle.probe_events_at = {}, None
    every = handle.settings.probe_events_seconds
    if not events_due(bool(failing), listed_at=handle.probe_events_at, now=now, every=every):
        return
    handle.probe_events_at = now
    try:
        events = await runtime.kube.list_events(handle.namespace, UNHEALTHY_EVENTS)
    except Exception as error:  # the condition names the agents without it; tried again later
        log.warning("pool %s/%s: listing Events: %s", handle.namespace, handle.name, error)
        return
    handle.probe_errors = probe_errors(events, agents=[agent.name for agent in failing])


def probe_failures(
    conditions: Sequence[ConditionView],
    handle: PoolHandle,
    policy: PoolPolicy,
    agents: Sequence[ObservedAgent],
    now: float,
) -> Sequence[ConditionView]:
    """The conditions with Degraded ReadinessFailing for the agents past the probe threshold,
    if any, where nothing else is reported."""
    threshold, failing = past_probe_threshold(handle, policy, agents, now)
    if not failing:
        return conditions
    failure = probe_failure_condition(failing, handle.probe_errors, threshold=threshold)
    told = last_probe_error(failing, handle.probe_errors)
    return with_probe_failures(conditions, failure, told=told)


def sample(handle: PoolHandle, policy: PoolPolicy, now: float) -> None:
    """Add the pool's demand now to its history, for the sizing advice."""
    handle.history = sample_demand(
        handle.history,
        busy=handle.broker.counts()["busy_slots"],
        waiting=waiting_slots(policy, handle.broker.waiters()),
        slots=policy.slots,
        now=now,
        every=handle.settings.sample_seconds,
        window=handle.settings.sample_window_seconds,
        quiet=handle.quiet,
    )


def record_metrics(
    handle: PoolHandle, waiting: int, *, slots: int = 0, busy_slots: int = 0
) -> None:
    """Set the pool's gauges: its agents by state, its waiters, and its slots busy and free."""
    states = agent_states(handle.broker.agents(), kept=handle.kept)
    for state, count in states.items():
        metrics.AGENTS.labels(handle.namespace, handle.name, state).set(count)
    metrics.WAITERS.labels(handle.namespace, handle.name).set(waiting)
    metrics.GATEWAY_WAITING.labels(handle.namespace, handle.name).set(handle.gateway_waiting)
    metrics.SLOTS.labels(handle.namespace, handle.name, "busy").set(busy_slots)
    metrics.SLOTS.labels(handle.namespace, handle.name, "free").set(max(0, slots - busy_slots))


def record_degraded(handle: PoolHandle, conditions: Iterable[ConditionView]) -> None:
    """Set the pool's Degraded gauge from the conditions about to be written."""
    degraded = next((c for c in conditions if c.type == ConditionType.DEGRADED), None)
    if degraded is None or degraded.status != "True":
        metrics.set_pool_degraded(
            handle.namespace, handle.name, degraded=False, reason=str(Reason.AS_EXPECTED)
        )
        return
    metrics.set_pool_degraded(
        handle.namespace, handle.name, degraded=True, reason=str(degraded.reason)
    )
