"""The AgentPool controller: one reconcile loop per pool, level-based.

A kopf daemon runs for each AgentPool. Each pass observes the pool's pods (kept current by the pod
watch in :mod:`agentpool.handlers.pods`) and the broker's waiters, asks the pure pool core for a
plan, applies it (retire through the broker, then delete; create pods) and writes the status when
it changed. A pass runs when something changes (a pod event, a waiter, a spec change) and at
least every few seconds for the time-based rules (idle timeout, lifetime).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any

import kopf

from agentpool import GROUP, VERSION, metrics
from agentpool.api import AgentPoolSpec
from agentpool.api.reasons import EventReason, RetireReason
from agentpool.broker import Checkout, Outcome
from agentpool.handlers import failures, tokens
from agentpool.handlers.poolstatus import write_status
from agentpool.handlers.runtime import PoolHandle, Runtime
from agentpool.pool import PoolPolicy, plan
from agentpool.pool.manifests import (
    POOL_LABEL,
    agent_pod,
    owned_by,
    template_hash,
    token_hash,
)
from agentpool.pool.pods import is_ready, observe_pod, ready_since
from agentpool.pool.recycling import summarise_retirements
from agentpool.pool.resizing import size_events

__all__ = ["POOL_LABEL", "register", "sync_broker"]

log = logging.getLogger(__name__)

#: The longest a pass waits for a trigger before looking again.
IDLE_PASS_SECONDS = 5.0
#: While overflow or lifetimes are in play, look often enough to honour them to the second.
TIMED_PASS_SECONDS = 1.0
#: A deleted pool waits this long for busy agents before its pods go.
DRAIN_SECONDS = 30.0
#: A restored agent that answers nothing for this long is lost.
RESTORED_SILENCE_SECONDS = 30.0
#: How often an agent found busy after a restart is asked whether it is done.
RESTORED_POLL_SECONDS = 0.5


def policy_of(spec: AgentPoolSpec, *, token: str = "") -> PoolPolicy:
    return PoolPolicy.from_spec(
        spec, template_hash=template_hash(spec), token_hash=token_hash(token) if token else ""
    )


def sync_broker(handle: PoolHandle) -> None:
    """Hand the broker the pods as they are now; readiness changes take effect at once."""
    now = time.time()
    observed = []
    for name, pod in handle.pods.items():
        if is_ready(pod) and name not in handle.first_ready:
            # When it turned Ready, not when this operator first saw it: a restarted operator
            # must not count a pod's age as its cold start.
            handle.first_ready[name] = ready_since(pod) or now
            handle.crash_failures, handle.start_failures = 0, []
        observed.append(observe_pod(pod, first_ready=handle.first_ready.get(name)))
    handle.broker.update_agents(observed)
    for name in list(handle.first_ready):
        if name not in handle.pods:
            del handle.first_ready[name]


def register(registry: kopf.OperatorRegistry, runtime: Runtime) -> None:
    @kopf.index(
        "v1", "pods", id="pods_by_pool", labels={POOL_LABEL: kopf.PRESENT}, registry=registry
    )
    def pods_by_pool(
        body: kopf.Body, namespace: str | None, labels: Mapping[str, str], **_: Any
    ) -> dict[tuple[str | None, str], dict[str, Any]]:
        # Seen by the pool loop when it starts, so a restarted operator knows every pod (kopf
        # starts no handler before every index has been listed).
        return {(namespace, labels[POOL_LABEL]): dict(body)}

    @kopf.on.event(GROUP, VERSION, "agentpools", id="pool_event", registry=registry)
    async def pool_event(namespace: str | None, name: str, **_: Any) -> None:
        handle = runtime.pools.get((namespace or "", name))
        if handle is not None:
            handle.poke()

    @kopf.daemon(
        GROUP,
        VERSION,
        "agentpools",
        id="pool_loop",
        registry=registry,
        backoff=2,
        # The loop ends by itself as soon as it is stopped (the deletion handler drains), so
        # kopf never needs to cancel it: a deletion is not a cancellation.
        cancellation_backoff=5,
        cancellation_timeout=10,
    )
    async def pool_loop(
        body: kopf.Body,
        name: str,
        namespace: str | None,
        stopped: kopf.DaemonStopped,
        **kwargs: Any,
    ) -> None:
        namespace = namespace or ""
        pods_by_pool: kopf.Index[tuple[str, str], dict[str, Any]] = kwargs["pods_by_pool"]
        key = (namespace, name)
        policy = policy_of(AgentPoolSpec.model_validate(body.get("spec") or {}))
        wake = asyncio.Event()
        handle = PoolHandle(
            namespace=namespace,
            name=name,
            broker=runtime.brokers.ensure(namespace, name, policy, on_change=wake.set),
            port=policy.port,
            wake=wake,
            uid=str(body["metadata"].get("uid") or ""),
        )
        runtime.starting[key] = handle
        try:
            for pod in pods_by_pool.get(key, []):
                if owned_by(pod, handle.uid):
                    handle.pods.setdefault(pod["metadata"]["name"], pod)
            handle.token = await tokens.open_token(runtime, handle, body)
            handle.pods.update(runtime.orphan_pods.pop(key, {}))
            sync_broker(handle)
            await restore_held_agents(runtime, handle)
        finally:
            runtime.starting.pop(key, None)
        # Pod events seen before the loop existed; no await from here to the registration.
        handle.pods.update(runtime.orphan_pods.pop(key, {}))
        sync_broker(handle)
        runtime.pools[key] = handle
        runtime.started_event(key).set()
        stopping = asyncio.ensure_future(stopped.wait())
        try:
            while not stopped:
                handle.wake.clear()
                try:
                    delay = await reconcile(runtime, handle, body)
                except ValueError as error:
                    log.warning("pool %s/%s: %s", namespace, name, error)
                    delay = IDLE_PASS_SECONDS
                woken = asyncio.ensure_future(handle.wake.wait())
                await asyncio.wait({woken, stopping}, timeout=delay, return_when="FIRST_COMPLETED")
                woken.cancel()
        finally:
            stopping.cancel()
            deleted = bool(
                stopped.reason and stopped.reason & kopf.DaemonStoppingReason.RESOURCE_DELETED
            )
            if deleted:
                # Refuse checkouts at once; pool_drain lets busy agents finish and deletes pods.
                runtime.brokers.close(namespace, name, broker=handle.broker)
                if not handle.drained:
                    runtime.draining[key] = handle
                metrics.forget_pool_gauges(namespace, name)
                asyncio.get_running_loop().call_later(
                    metrics.FORGET_AFTER_SECONDS, _forget_counts, runtime, key
                )
            forget_handle(runtime, handle)

    @kopf.on.delete(GROUP, VERSION, "agentpools", id="pool_drain", registry=registry)
    async def pool_drain(name: str, namespace: str | None, **kwargs: Any) -> None:
        # Here rather than in the loop's own ending, so the loop stops at once when the pool is
        # deleted and the wait for busy agents is an ordinary handler, retried if it fails.
        key = (namespace or "", name)
        # The deleted pool's own handle, never that of a pool created since under its name.
        uid = str((kwargs["body"].get("metadata") or {}).get("uid") or "")
        handle = next(
            (
                found
                for found in (runtime.draining.get(key), runtime.pools.get(key))
                if found is not None and found.uid == uid
            ),
            None,
        )
        if handle is not None:
            await drain(runtime, handle)
            handle.drained = True
        else:  # the loop never started here (the pool was deleted while the operator was down)
            pods_by_pool: kopf.Index[tuple[str, str], dict[str, Any]] = kwargs["pods_by_pool"]
            for pod in pods_by_pool.get(key, []):
                if owned_by(pod, uid):
                    await runtime.kube.delete_pod(key[0], pod["metadata"]["name"])
        if runtime.draining.get(key) is handle:
            runtime.draining.pop(key, None)


def forget_handle(runtime: Runtime, handle: PoolHandle) -> None:
    """Drop this pool's handle, but never that of a new pool created since under its name."""
    key = (handle.namespace, handle.name)
    if runtime.pools.get(key) is handle:
        del runtime.pools[key]
        runtime.pool_started.pop(key, None)


def _forget_counts(runtime: Runtime, key: tuple[str, str]) -> None:
    if key not in runtime.pools:  # unless a pool of the same name came since
        metrics.forget_pool_counts(*key)


async def restore_held_agents(runtime: Runtime, handle: PoolHandle) -> None:
    """After a restart, take back what was held before it, before any checkout is served.

    Agents of Bound leases go back to their leases (their clients talk to them directly, so they
    may look idle between requests); agents that report work in progress on ``GET /status`` stay
    busy until they report idle. Either way, no agent is handed out twice.
    """
    leased: set[str] = set()
    for lease in await runtime.kube.list_custom("agentleases", handle.namespace):
        spec, status = lease.get("spec") or {}, lease.get("status") or {}
        agent = status.get("agent")
        if (spec.get("poolRef") or {}).get("name") != handle.name or not agent:
            continue
        if status.get("phase") != "Bound":
            continue
        checkout = handle.broker.restore_busy(str(agent), None)
        if checkout is not None:
            leased.add(str(agent))
            runtime.restored_leases[(handle.namespace, lease["metadata"]["name"])] = checkout
    agents = [a for a in handle.broker.agents() if a.ready and a.ip and a.name not in leased]
    statuses = await asyncio.gather(
        *(
            runtime.agents.status(f"http://{a.ip}:{handle.port}", handle.token, timeout=2.0)
            for a in agents
        )
    )
    for agent, found in zip(agents, statuses, strict=True):
        if found is None:
            continue
        # The agent's own count, so maxUses holds across the restart.
        handle.broker.restore_uses(agent.name, found.uses)
        if not found.busy:
            continue
        checkout = handle.broker.restore_busy(agent.name, _item_id(found.current))
        if checkout is not None:
            task = asyncio.create_task(release_when_idle(runtime, handle, checkout))
            runtime.restorers.add(task)
            task.add_done_callback(runtime.restorers.discard)


def _item_id(current: Any) -> str | None:
    return None if current is None else str(current)


async def release_when_idle(runtime: Runtime, handle: PoolHandle, checkout: Checkout) -> None:
    """Hold a restored agent until it reports idle; one that stops answering is lost."""
    silent_since: float | None = None
    while not checkout.is_lost:
        status = await runtime.agents.status(checkout.endpoint, handle.token, timeout=2.0)
        if status is not None and not status.busy:
            handle.broker.checkin(checkout, Outcome.SUCCESS)
            return
        now = time.monotonic()
        if status is not None:
            silent_since = None
        elif silent_since is None:
            silent_since = now
        elif now - silent_since > RESTORED_SILENCE_SECONDS:
            handle.broker.checkin(checkout, Outcome.LOST)
            return
        await asyncio.sleep(RESTORED_POLL_SECONDS)


async def reconcile(runtime: Runtime, handle: PoolHandle, body: kopf.Body) -> float:
    """One pass: plan from what is observed, apply, report. Returns when to look again."""
    pool = dict(body)
    spec = AgentPoolSpec.model_validate(pool.get("spec") or {})
    await tokens.keep_token_secret(runtime, handle, body)
    policy = policy_of(spec, token=handle.token)
    handle.port = policy.port
    handle.reset_between_items = spec.reset_between_items
    handle.broker.update_policy(policy)
    sync_broker(handle)
    now = time.time()
    agents = handle.broker.agents()
    waiters = handle.broker.waiters()
    decided = plan(policy, agents, waiters, now)

    retired = set(handle.broker.retire(decided.retired_names))
    done = [(r.name, r.reason) for r in decided.retire if r.name in retired]
    for name, reason in done:
        failures.set_aside(handle, name, reason, now)
        if reason == str(RetireReason.UNREADY):
            handle.last_unready = (name, now)
        if reason == str(RetireReason.QUARANTINED):
            handle.quarantine_backoff = handle.quarantine_backoff.failed(now)
    if done:
        _event(body, "Normal", EventReason.AGENT_RETIRED, summarise_retirements(done))
    failures.release_kept(handle, now)
    await delete_retired(runtime, handle)
    created = 0
    wanted = decided.create
    hold = max(handle.crash_backoff_until - now, handle.quarantine_backoff.hold(now))
    if wanted and hold > 0:
        # Agents keep failing before they ever turn Ready, or keep being quarantined: back off
        # instead of churning pods.
        handle.wake_at(hold)
        wanted = 0
    for _ in range(wanted):
        try:
            pod = await runtime.kube.create_pod(
                handle.namespace, agent_pod(pool, spec=spec, token=handle.token)
            )
        except Exception as error:  # reported, and retried on the next pass
            message = f"Creating an agent pod failed: {error}"
            _event(body, "Warning", EventReason.CREATE_FAILED, message)
            break
        handle.pods[pod["metadata"]["name"]] = pod
        created += 1
    if created:
        sync_broker(handle)
    scaled_down = sum(1 for name, reason in done if reason in SCALE_DOWN_REASONS)
    for event in size_events(
        before=sum(1 for agent in agents if agent.live),
        retired=len(done),
        scaled_down=scaled_down,
        created=created,
        waiting=len(waiters),
    ):
        _event(body, "Normal", event.reason, event.message)

    await write_status(runtime, handle, pool, policy, now)
    timed = policy.max_overflow > 0 or policy.max_lifetime_seconds > 0 or waiters
    return TIMED_PASS_SECONDS if timed else IDLE_PASS_SECONDS


async def delete_retired(runtime: Runtime, handle: PoolHandle) -> None:
    """Delete the pods of retired agents; a delete that fails is tried again on the next pass
    (the broker already keeps the agent out, so nothing can check it out meanwhile)."""
    for name in sorted(handle.undeleted):
        pod = handle.pods.get(name)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            handle.undeleted.discard(name)
            continue
        try:
            await runtime.kube.delete_pod(handle.namespace, name)
        except Exception as error:  # retried on the next pass
            log.warning(
                "pool %s/%s: deleting pod %s failed: %s", handle.namespace, handle.name, name, error
            )
            continue
        handle.undeleted.discard(name)


async def drain(runtime: Runtime, handle: PoolHandle) -> None:
    """The pool is being deleted: refuse new checkouts, let busy agents finish (bounded),
    then delete the pods."""
    # From here no checkout finds this pool: a pool re-created under its name gets its own.
    forget_handle(runtime, handle)
    runtime.brokers.close(handle.namespace, handle.name, broker=handle.broker)
    deadline = time.monotonic() + DRAIN_SECONDS
    while handle.broker.counts()["busy"] and time.monotonic() < deadline:
        handle.wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(handle.wake.wait(), 0.5)
    for name in list(handle.pods):
        await runtime.kube.delete_pod(handle.namespace, name)


SCALE_DOWN_REASONS = frozenset({str(RetireReason.IDLE_TIMEOUT), str(RetireReason.SCALED_DOWN)})


def _event(body: kopf.Body, kind: str, reason: str, message: str) -> None:
    kopf.event(body, type=kind, reason=str(reason), message=message)
