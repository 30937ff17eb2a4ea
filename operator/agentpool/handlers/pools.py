"""The AgentPool controller: one reconcile loop per pool, level-based.

A kopf daemon runs for each AgentPool. Each pass observes the pool's pods (kept current by the pod
watch in :mod:`agentpool.handlers.pods`) and the broker's waiters, asks the pure pool core for a
plan, applies it (retire through the broker, then delete; create pods) and writes the status when
it changed. A pass runs when something changes (a pod event, a waiter, a spec change) and at
least every few seconds for the time-based rules (idle timeout, lifetime). Each handler is a
module-level coroutine that takes the :class:`~agentpool.handlers.runtime.Runtime`;
:func:`register` binds it to its kopf decorator.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from typing import Any

import kopf

from agentpool import metrics
from agentpool.api import AgentPoolSpec, parse_spec
from agentpool.api.base import SpecError
from agentpool.api.raw import RawBody, raw_body
from agentpool.api.reasons import EventReason, RetireReason
from agentpool.broker.registry import PoolKey
from agentpool.handlers import failures, gatewaysetup, replicas, tokens
from agentpool.handlers.poolstatus import report_invalid_spec, write_status
from agentpool.handlers.recovery import restore_held_agents
from agentpool.handlers.registration import KindHandlers
from agentpool.handlers.runtime import PoolHandle, Runtime
from agentpool.io import events
from agentpool.io.kube import Refused
from agentpool.pool import Plan, PoolPolicy, plan
from agentpool.pool.headroom import decide_headroom, desired_min_idle, restored_state
from agentpool.pool.health import report_create_failure
from agentpool.pool.listing import join_listing
from agentpool.pool.manifests import (
    POOL_LABEL,
    agent_pod,
    owned_by,
    template_hash,
    token_hash,
)
from agentpool.pool.passes import pass_delay, scaled_down, steady
from agentpool.pool.pods import is_ready, observe_pod, ready_since
from agentpool.pool.recycling import summarise_retirements
from agentpool.pool.resizing import size_events
from agentpool.pool.schedules import Warmth, warmth
from agentpool.pool.sizing import recommend

__all__ = ["POOL_LABEL", "register", "sync_broker"]

log = logging.getLogger(__name__)


#: Why kopf stops a pool's loop when the operator pauses for a peer or exits: its watches (and
#: the operator's own of the leases, at an exit) end then, so the leases stop being driven at
#: once.
STANDING_DOWN = (
    kopf.DaemonStoppingReason.OPERATOR_PAUSING | kopf.DaemonStoppingReason.OPERATOR_EXITING
)


#: Why a pool's broker closed when another replica took the pool: not a deletion.
MOVED = "is served by another replica now"
#: How often a pool being handed over is looked at again by the replica that had it, until its
#: watch says it is gone (or it is handed back).
HANDOVER_POLL_SECONDS = 0.5


def register(registry: kopf.OperatorRegistry, runtime: Runtime) -> None:
    """Bind the AgentPool handlers to ``registry``, each given ``runtime``."""
    handlers = KindHandlers("agentpools", registry, runtime)
    handlers.on_event(pool_event)
    # The loop ends by itself as soon as it is stopped (the deletion handler drains), so kopf
    # never needs to cancel it: a deletion is not a cancellation.
    handlers.daemon(pool_loop, cancellation_backoff=5)
    handlers.on_delete(pool_drain)


async def pool_event(
    runtime: Runtime,
    /,
    namespace: str | None,
    name: str,
    type: str | None = None,
    meta: kopf.Meta | None = None,
    **_: Any,
) -> None:
    """The pool object changed: its loop looks again. Sharing the pools, a pool that left this
    replica's watch without being deleted (relabelled away) is noted gone, so its loop ends."""
    key = (namespace or "", name)
    if runtime.sharing is not None:
        if type == "DELETED" and not (meta is not None and meta.deletion_timestamp):
            runtime.placements.gone.add(key)
        else:
            runtime.placements.gone.discard(key)
    handle = runtime.pools.get(key)
    if handle is not None:
        handle.poke()


def policy_of(spec: AgentPoolSpec, *, token: str = "", warm: Warmth | None = None) -> PoolPolicy:
    """The pool core's policy for a pool's validated spec (and agent token, and the sizes its
    schedules put in force now)."""
    return PoolPolicy.from_spec(
        spec,
        template_hash=template_hash(spec),
        token_hash=token_hash(token) if token else "",
        warmth=warm,
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
            handle.health = handle.health.agent_ready()
        observed.append(observe_pod(pod, first_ready=handle.first_ready.get(name)))
    handle.broker.update_agents(observed)
    for name in list(handle.first_ready):
        if name not in handle.pods:
            del handle.first_ready[name]


async def pool_loop(
    runtime: Runtime, /, body: kopf.Body, stopped: kopf.DaemonStopped, **kwargs: Any
) -> None:
    """The pool's daemon: start serving it, reconcile until stopped, then let it go."""
    key = (body.metadata.namespace or "", body.metadata.name)
    while not stopped:
        if key in runtime.placements.gone:
            runtime.placements.gone.discard(key)
            return  # another replica's now: this daemon is kopf's no longer
        if not runtime.works_on(body.metadata):
            # Being handed to another replica: once it is, its watch ends this loop (a pool
            # handed back starts again).
            await replicas.hand_over(runtime, key, lambda: park(runtime, key))
            await stopped.wait(HANDOVER_POLL_SECONDS)
            continue
        if not await await_valid_spec(runtime, body, stopped):
            return
        handle = await start_pool(runtime, body, key)
        try:
            await run_passes(runtime, handle, body, stopped)
        finally:
            end_pool(runtime, handle, stopped, left=not keeps(runtime, key, body))


async def await_valid_spec(runtime: Runtime, body: kopf.Body, stopped: kopf.DaemonStopped) -> bool:
    """Wait until the pool's spec validates, marking the pool InvalidSpec meanwhile; False when
    the loop was stopped first. kopf keeps ``body`` current, so a fixed spec is seen here."""
    while not stopped:
        try:
            parse_spec(AgentPoolSpec, body.get("spec"))
        except SpecError as error:
            log.warning("pool %s/%s: %s", body.metadata.namespace, body.metadata.name, error)
            await report_invalid_spec(runtime, raw_body(body), error)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopped.wait(), runtime.settings.pools.idle_pass_seconds)
            continue
        return True
    return False


async def start_pool(runtime: Runtime, body: kopf.Body, key: PoolKey) -> PoolHandle:
    """The pool's handle, serving checkouts once it knows its pods, its token and what was held
    before a restart.

    The pool lists its own pods rather than waiting for kopf to index every pod first: with an
    index, kopf starts no handler until all pods are listed and wakes every waiting handler on
    each pod listed, which at 10,000 agents kept a restarted operator from serving any pool for
    minutes."""
    namespace, name = key
    spec = parse_spec(AgentPoolSpec, body.get("spec"))
    warm = warmth(spec, runtime.clock.now())
    policy = policy_of(spec, warm=warm)
    wake = asyncio.Event()
    handle = PoolHandle(
        namespace=namespace,
        name=name,
        broker=runtime.brokers.ensure(namespace, name, policy, on_change=wake.set),
        port=policy.port,
        wake=wake,
        uid=str(body["metadata"].get("uid") or ""),
        settings=runtime.settings.pools,
        spec=spec,
    )
    runtime.pools.starting[key] = handle
    try:
        await adopt_pods(runtime, handle)
        handle.token = await tokens.open_token(runtime, handle, body)
        # With the token known, the agents that hold another are told apart before recovery.
        handle.broker.update_policy(policy_of(spec, token=handle.token, warm=warm))
        handle.pods.update(runtime.pools.orphan_pods.pop(key, {}))
        sync_broker(handle)
        await restore_held_agents(runtime, handle)
    finally:
        runtime.pools.starting.pop(key, None)
    # Pod events seen before the loop existed; no await from here to the registration.
    handle.pods.update(runtime.pools.orphan_pods.pop(key, {}))
    sync_broker(handle)
    runtime.pools.serve(handle)
    runtime.leases.resume()
    runtime.pools.deleted_pods.pop(key, None)
    return handle


async def adopt_pods(runtime: Runtime, handle: PoolHandle) -> None:
    """Take the pool's pods from its own listing and from the pod events seen so far."""
    key = (handle.namespace, handle.name)
    listed = await runtime.listings.pods.get(handle.namespace, handle.name)
    seen = {**runtime.pools.orphan_pods.pop(key, {}), **handle.pods}
    handle.pods.clear()
    joined = join_listing(
        (pod for pod in listed if owned_by(pod, handle.uid)),
        seen=seen,
        deleted=runtime.pools.deleted_pods.get(key, set()),
    )
    handle.pods.update(joined)


async def run_passes(
    runtime: Runtime, handle: PoolHandle, body: kopf.Body, stopped: kopf.DaemonStopped
) -> None:
    """Reconcile on every trigger, and at the latest when the pass said, until stopped."""
    stopping = asyncio.ensure_future(stopped.wait())
    try:
        # A pool handed to another replica ends its loop here, as a stopped one does.
        key = (handle.namespace, handle.name)
        while not stopped and keeps(runtime, key, body):
            handle.wake.clear()
            try:
                delay = await reconcile(runtime, handle, body)
            except SpecError as error:
                unjudged(handle)
                log.warning("pool %s/%s: %s", handle.namespace, handle.name, error)
                await report_invalid_spec(runtime, raw_body(body), error)
                # The next valid pass writes its status in full, whatever was written before.
                handle.last_status = None
                delay = handle.settings.idle_pass_seconds
            except ValueError as error:
                unjudged(handle)
                log.warning("pool %s/%s: %s", handle.namespace, handle.name, error)
                delay = handle.settings.idle_pass_seconds
            woken = asyncio.ensure_future(handle.wake.wait())
            await asyncio.wait({woken, stopping}, timeout=delay, return_when="FIRST_COMPLETED")
            woken.cancel()
    finally:
        stopping.cancel()


def keeps(runtime: Runtime, key: PoolKey, body: kopf.Body) -> bool:
    """Whether this replica works on the pool still: always alone; sharing, while it carries
    this replica's name with no hand-over, and has not left its watch."""
    return runtime.works_on(body.metadata) and key not in runtime.placements.gone


def unjudged(handle: PoolHandle) -> None:
    """A pass failed before it judged the pool: it is not taken for quiet meanwhile (its agents
    serve on, and their demand is sampled as a busy pool's)."""
    handle.quiet = handle.broker.wake_on_checkout = False


def end_pool(
    runtime: Runtime, handle: PoolHandle, stopped: kopf.DaemonStopped, *, left: bool = False
) -> None:
    """The loop ended: a deleted pool refuses checkouts and waits for pool_drain; a paused or
    exiting operator's leases are left to the replica that acts next; a pool that ``left`` this
    replica (another works on it, or it is handed to one) refuses checkouts here, its pods left
    as they are; either way, its handle goes."""
    reason = stopped.reason
    if reason and reason & STANDING_DOWN:
        runtime.leases.pause()
    if left:
        # Not deleted: its waiters hear it is served elsewhere, and go there (a gateway call).
        runtime.brokers.close(handle.namespace, handle.name, MOVED, broker=handle.broker)
        metrics.forget_pool_gauges(handle.namespace, handle.name)
    elif reason and reason & kopf.DaemonStoppingReason.RESOURCE_DELETED:
        namespace, name = key = (handle.namespace, handle.name)
        # Refuse checkouts at once; pool_drain lets busy agents finish and deletes pods.
        runtime.brokers.close(namespace, name, broker=handle.broker)
        if not handle.drained:
            runtime.pools.draining[key] = handle
        metrics.forget_pool_gauges(namespace, name)
        asyncio.get_running_loop().call_later(
            metrics.FORGET_AFTER_SECONDS, _forget_counts, runtime, key
        )
    runtime.pools.forget(handle)


async def park(runtime: Runtime, key: PoolKey) -> None:
    """Before the pool ``key`` goes to another replica: its runs stopped where their status
    says, its leases parked Bound."""
    await runtime.runs.park(*key)
    await park_leases(runtime, key)


async def park_leases(runtime: Runtime, key: PoolKey) -> None:
    """Stop driving the leases of the pool ``key`` here, leaving them Bound, and wait for their
    tasks to end: the replica the pool goes to takes them up with it."""
    namespace, pool = key
    ending = []
    for lease_key, entry in runtime.leases.tasks.items():
        lease = runtime.leases.latest.get(lease_key) or {}
        if (
            lease_key[0] == namespace
            and (lease.get("spec") or {}).get("poolRef", {}).get("name") == pool
        ):
            entry.stop.set(deleted=False)
            ending.append(entry.task)
    if ending:
        await asyncio.wait(ending, timeout=runtime.settings.leases.stop_seconds)


async def pool_drain(runtime: Runtime, /, name: str, namespace: str | None, **kwargs: Any) -> None:
    """The pool is deleted: let its busy agents finish, then delete its pods.

    Here rather than in the loop's own ending, so the loop stops at once when the pool is
    deleted and the wait for busy agents is an ordinary handler, retried if it fails.
    """
    key = (namespace or "", name)
    # The deleted pool's own handle, never that of a pool created since under its name.
    uid = str((kwargs["body"].get("metadata") or {}).get("uid") or "")
    pools = runtime.pools
    handle = next(
        (
            found
            for found in (pools.draining.get(key), pools.get(key))
            if found is not None and found.uid == uid
        ),
        None,
    )
    if handle is not None:
        await drain(runtime, handle)
        handle.drained = True
    else:  # the loop never started here (the pool was deleted while the operator was down)
        for pod in await runtime.kube.list_pods(key[0], f"{POOL_LABEL}={name}"):
            if owned_by(pod, uid):
                await runtime.kube.delete_pod(key[0], pod["metadata"]["name"])
    if pools.draining.get(key) is handle:
        pools.draining.pop(key, None)


def _forget_counts(runtime: Runtime, key: PoolKey) -> None:
    if key not in runtime.pools:  # unless a pool of the same name came since
        metrics.forget_pool_counts(*key)


async def reconcile(runtime: Runtime, handle: PoolHandle, body: kopf.Body) -> float:
    """One pass: plan from what is observed, apply, report. Returns when to look again."""
    pool = raw_body(body)
    spec = parse_spec(AgentPoolSpec, pool.get("spec"))
    await tokens.keep_token_secret(runtime, handle, body)
    published = await _keep_gateway_published(runtime, handle)
    wall = runtime.clock.now()
    now = time.time()
    warm = keep_headroom(handle, body, spec, warmth(spec, wall), wall=wall, now=now)
    policy = policy_of(spec, token=handle.token, warm=warm)
    handle.spec = spec
    handle.port = policy.port
    handle.reset_between_items = spec.reset_between_items
    handle.broker.update_policy(policy)
    sync_broker(handle)
    agents = handle.broker.agents()
    waiters = handle.broker.waiters()
    decided = plan(policy, agents, waiters, now, kept=handle.kept)
    done = retire(handle, body, decided, now)
    failures.drop_kept(handle, now, give_way=decided.give_way)
    await delete_retired(runtime, handle)
    await check_template(runtime, handle, body=body, pool=pool, spec=spec, policy=policy, now=now)
    created = await create_agents(
        runtime, handle, body=body, pool=pool, spec=spec, wanted=decided.create, now=now
    )
    for event in size_events(
        before=sum(1 for agent in agents if agent.live),
        retired=len(done),
        scaled_down=scaled_down(done),
        created=created,
        waiting=len(waiters),
    ):
        events.post(body, type="Normal", reason=str(event.reason), message=event.message)
    status = await write_status(runtime, handle, pool, policy, now, open_schedules=warm.open)
    # Pods made or retired, headroom moving, or a step to try again: the pool is not steady.
    retry = not published or handle.checked_template != policy.template_hash
    changed = bool(done or created) or spec.headroom.mode == "Auto" or retry
    delay = next_pass(handle, policy, status, changed=changed)
    if warm.next_edge is None:
        return delay
    # Look again as a window opens or closes, not a pass later.
    return max(0.0, min(delay, warm.next_edge - wall))


def next_pass(
    handle: PoolHandle, policy: PoolPolicy, status: dict[str, Any], *, changed: bool
) -> float:
    """Seconds until the pool's next pass at the latest, from what this one left (``changed``:
    it created or retired agents, or headroom may still move). A steady pool goes quiet, and
    its first checkout wakes it."""
    waiting = len(handle.broker.waiters())
    handle.quiet = steady(
        policy,
        handle.broker.agents(),
        conditions=status.get("conditions") or (),
        waiting=waiting,
        pending=changed or bool(handle.undeleted or handle.kept),
    )
    handle.broker.wake_on_checkout = handle.quiet
    return pass_delay(
        policy,
        waiting=waiting,
        idle=handle.settings.idle_pass_seconds,
        timed=handle.settings.timed_pass_seconds,
        quiet=handle.settings.quiet_pass_seconds,
        steady=handle.quiet,
    )


def keep_headroom(
    handle: PoolHandle,
    body: kopf.Body,
    spec: AgentPoolSpec,
    warm: Warmth,
    *,
    wall: float,
    now: float,
) -> Warmth:
    """``warm`` with the minIdle that headroom Auto puts in force (at least the schedules'):
    the pool's own advice, followed as fast as the spec allows; each change is an Event. The
    advice reads the demand history, sampled at ``now``; the pace goes by the runtime's clock,
    ``wall``."""
    advice = recommend(handle.history, now=now, window=handle.settings.sample_window_seconds)
    if spec.headroom.mode == "Auto" and handle.headroom.min_idle is None:
        # First pass of this process: carry on from what status shows was in force.
        stored = (body.get("status") or {}).get("effectiveMinIdle")
        handle.headroom = restored_state(stored, wall)
    decision = decide_headroom(
        spec.headroom,
        handle.headroom,
        advice=None
        if advice is None
        else desired_min_idle(peak_demand=advice.peak_demand, median_demand=advice.median_demand),
        floor=warm.min_idle,
        ceiling=max(spec.effective_max_size, warm.min_size) - warm.min_size,
        now=wall,
    )
    handle.headroom = decision.state
    if decision.message is not None:
        events.post(
            body,
            type="Normal",
            reason=str(EventReason.HEADROOM_CHANGED),
            message=f"{decision.message}; from {advice.samples if advice else 0} demand samples",
        )
    return dataclasses.replace(warm, min_idle=decision.min_idle)


async def _keep_gateway_published(runtime: Runtime, handle: PoolHandle) -> bool:
    """Tell the pool's namespace where the gateway is; a failure is tried on a later pass.
    Whether it is told."""
    try:
        await gatewaysetup.keep_published(runtime, handle.namespace)
    except Exception as error:
        log.warning("namespace %s: publishing the gateway failed: %s", handle.namespace, error)
        return False
    return True


def retire(
    handle: PoolHandle, body: kopf.Body, decided: Plan, now: float
) -> list[tuple[str, RetireReason]]:
    """Take the agents the plan retires out of the broker and set them aside; returns those
    retired, (name, reason) each: never a busy one."""
    retired = set(handle.broker.retire(decided.retired_names))
    done = [(r.name, r.reason) for r in decided.retire if r.name in retired]
    for name, reason in done:
        failures.set_aside(handle, name, reason, now)
        metrics.AGENTS_RETIRED.labels(handle.namespace, handle.name, str(reason)).inc()
    if done:
        events.post(
            body,
            type="Normal",
            reason=str(EventReason.AGENT_RETIRED),
            message=summarise_retirements(done),
        )
    return done


async def create_agents(
    runtime: Runtime,
    handle: PoolHandle,
    *,
    body: kopf.Body,
    pool: RawBody,
    spec: AgentPoolSpec,
    wanted: int,
    now: float,
) -> int:
    """Create the agent pods the plan asks for from the pool as the pass read it, unless the
    pool backs off; returns how many."""
    hold = handle.health.creation_hold(now)
    if wanted and hold > 0:
        # Agents keep failing before they ever turn Ready, or keep being quarantined: back off
        # instead of churning pods.
        handle.wake_at(hold)
        return 0
    created = 0
    for _ in range(wanted):
        try:
            pod = await runtime.kube.create_pod(
                handle.namespace, agent_pod(pool, spec=spec, token=handle.token)
            )
        except Exception as error:  # reported, and retried after a back-off
            create_failed(handle, body, error, now)
            break
        handle.health = handle.health.create_passed()
        take_created(handle, pod)
        created += 1
        metrics.AGENTS_CREATED.labels(handle.namespace, handle.name).inc()
    if created:
        sync_broker(handle)
    return created


async def check_template(
    runtime: Runtime,
    handle: PoolHandle,
    *,
    body: kopf.Body,
    pool: RawBody,
    spec: AgentPoolSpec,
    policy: PoolPolicy,
    now: float,
) -> None:
    """Ask the API server, by a dry run, whether it would create the pool's pod once its
    template is new or changed: a refused template is reported before any pod is made (and
    even when the pool needs no new pod), and a fixed one lets creation go ahead at once.
    While a refusal stands, the dry run asks again each time the back-off has run, so one
    whose cause went (a quota, a webhook) clears even when the pool wants no new pod."""
    refused = handle.health.create_refusal is not None
    retry = refused and handle.health.creation_hold(now) <= 0
    if handle.checked_template == policy.template_hash and not retry:
        return
    try:
        await runtime.kube.create_pod(
            handle.namespace, agent_pod(pool, spec=spec, token=handle.token), dry_run=True
        )
    except Refused as error:
        create_failed(handle, body, error, now)
    except Exception as error:  # not the template's fault: asked again on the next pass
        log.warning("pool %s/%s: dry run failed: %s", handle.namespace, handle.name, error)
        return
    else:
        handle.health = handle.health.create_passed()
    handle.checked_template = policy.template_hash


def create_failed(handle: PoolHandle, body: kopf.Body, error: Exception, now: float) -> None:
    """A pod create was refused: back off, say so in Degraded, and post a Warning Event on the
    back-off's steps only (the 1st, 2nd, 4th, ... refusal in a row), not on every attempt."""
    message = str(error) or type(error).__name__
    handle.health = handle.health.create_failed(message, now)
    handle.wake_at(handle.health.creation_hold(now))
    count = handle.health.create_backoff.failures
    if report_create_failure(count):
        times = "" if count == 1 else f" ({count} times in a row)"
        events.post(
            body,
            type="Warning",
            reason=str(EventReason.CREATE_FAILED),
            message=f"Creating an agent pod failed{times}: {message}",
        )


def take_created(handle: PoolHandle, pod: RawBody) -> None:
    """Count a pod the pool just created, unless the watch told of it first: its events can
    reach the loop before the create's answer does, and are newer (a pod that failed at once
    is Failed already, and sends no further event to correct an older state)."""
    uid = str(pod["metadata"].get("uid") or "")
    if uid in handle.deleted_unknown:
        handle.deleted_unknown.discard(uid)
        return
    handle.pods.setdefault(pod["metadata"]["name"], pod)


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
    runtime.pools.forget(handle)
    runtime.brokers.close(handle.namespace, handle.name, broker=handle.broker)
    deadline = time.monotonic() + handle.settings.drain_seconds
    while handle.broker.counts()["busy"] and time.monotonic() < deadline:
        handle.wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(handle.wake.wait(), 0.5)
    for name in list(handle.pods):
        await runtime.kube.delete_pod(handle.namespace, name)
