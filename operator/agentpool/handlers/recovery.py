"""Restart recovery: a restarted pool loop takes back the agents that were held before it.

The operator keeps who holds which agent in memory only. When a pool's loop starts it calls
:func:`restore_held_agents` before serving any checkout: agents of Bound leases go back to their
leases (see :mod:`agentpool.handlers.leases`), and agents that report work in progress, or do not
answer in time, stay busy until they report idle; an agent with several slots keeps one slot
busy per item it reports, each until that item is done. That wait is
:func:`agentpool.handlers.idling.wait_until_idle`. An HTTP pool's agents are never asked: each
Ready one is idle, since what it served before went through the operator that is gone.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Coroutine
from typing import Any

from agentpool.broker import Checkout
from agentpool.handlers.idling import wait_until_idle
from agentpool.handlers.runtime import PoolHandle, Runtime
from agentpool.io.agents import AgentStatus
from agentpool.pool.checkin import CheckinOutcome
from agentpool.pool.checkout import is_available
from agentpool.pool.restoring import IdleWatch, bound_lease_agents


async def restore_held_agents(runtime: Runtime, handle: PoolHandle) -> None:
    """After a restart (or a pause, a peer acting meanwhile), take back what was held before
    it, before any checkout is served.

    Agents of Bound leases go back to their leases (their clients talk to them directly, so they
    may look idle between requests); agents that report work in progress on ``GET /status``, or
    give no answer in time, stay busy until they report idle. Either way, no agent is handed out
    twice. An HTTP pool's agents serve no ``/status``: the requests they held came through the
    operator (its gateway) that is gone, and died with it, so the Ready ones are idle as they are.
    """
    leased = await _leases_back(runtime, handle)
    if not handle.spec.speaks_protocol:
        return
    agents = [a for a in handle.broker.agents() if a.ready and a.ip and a.name not in leased]
    statuses = await asyncio.gather(
        *(restart_status(runtime, f"http://{a.ip}:{handle.port}", handle.token) for a in agents)
    )
    now = time.time()
    for agent, found in zip(agents, statuses, strict=True):
        if found is not None:
            # The agent's own count, so maxUses holds across the restart.
            handle.broker.restore_uses(agent.name, found.uses)
            if found.lease is not None:
                # Bound to a lease that is no longer Bound (deleted while no operator ran):
                # its token is taken back before the agent serves anyone else.
                _hold(runtime, handle, agent.name, unbind(runtime, handle, found.lease))
                continue
            if not found.busy:
                continue
        elif not is_available(handle.broker.policy, agent, now=now):
            # Silent, but never handed out as it is (it holds an old token, say): it is retired
            # and replaced as an idle agent would be.
            continue
        # Busy, or silent where it could be handed out (no answer in time on a loaded machine):
        # it may still be running items from before the restart, so it is held until it
        # reports them done, or lost.
        for item, whole in _held_slots(found, handle.broker.policy.slots):
            _hold(
                runtime,
                handle,
                agent.name,
                functools.partial(release_when_idle, runtime, handle, item=None if whole else item),
                item=item,
                whole=whole,
            )


async def _leases_back(runtime: Runtime, handle: PoolHandle) -> set[str]:
    """Give the agents of Bound leases back to their leases; the agents so held."""
    listed = await runtime.listings.leases.get(handle.namespace, handle.name)
    bound = bound_lease_agents(listed, handle.name)
    leased = keep_parked(runtime, handle, set(bound))
    for lease, held in bound:
        checkout = None if held in leased else handle.broker.restore_busy(held, None)
        if checkout is not None:
            leased.add(held)
            runtime.leases.restored[(handle.namespace, lease)] = checkout
    return leased


def keep_parked(runtime: Runtime, handle: PoolHandle, bound: set[tuple[str, str]]) -> set[str]:
    """The agents the pool's lease tasks parked when this operator was paused, kept for their
    leases still Bound to them (``bound``: lease and agent pairs); the others (the acting peer
    ended the lease, or bound it anew to another agent, meanwhile) go back to the pool, to be
    asked ``/status`` and unbound like any other."""
    kept = set()
    for key, checkout in list(runtime.leases.restored.items()):
        if key[0] != handle.namespace or checkout.pool != handle.name:
            continue
        if (key[1], checkout.agent) in bound:
            kept.add(checkout.agent)
        else:
            del runtime.leases.restored[key]
            handle.broker.checkin(checkout, CheckinOutcome.UNUSED)
    return kept


def _hold(
    runtime: Runtime,
    handle: PoolHandle,
    agent: str,
    release: Callable[[Checkout], Coroutine[Any, Any, None]],
    *,
    item: str | None = None,
    whole: bool = True,
) -> None:
    """Hold the agent's slot (or all of them) busy until ``release`` gives it back."""
    checkout = handle.broker.restore_busy(agent, item, whole=whole)
    if checkout is not None:
        task = asyncio.create_task(release(checkout))
        runtime.restorers.add(task)
        task.add_done_callback(runtime.restorers.discard)


def unbind(
    runtime: Runtime, handle: PoolHandle, lease: str
) -> Callable[[Checkout], Coroutine[Any, Any, None]]:
    """Give back an agent found bound to ``lease`` once it unbinds it (which resets it);
    retired when it does not."""

    async def release(checkout: Checkout) -> None:
        unbound = await runtime.agents.unbind(
            checkout.endpoint,
            handle.token,
            lease=lease,
            timeout=runtime.settings.leases.bind_timeout_seconds,
        )
        handle.broker.checkin(
            checkout, CheckinOutcome.SUCCESS if unbound else CheckinOutcome.RESET_FAILED
        )

    return release


async def restart_status(runtime: Runtime, endpoint: str, token: str) -> AgentStatus | None:
    """The agent's ``GET /status`` for a restarting pool, once one of the calls the operator
    allows at once is free: its timeout runs from the call, not from the wait for it."""
    if runtime.status_gate is None:
        runtime.status_gate = asyncio.Semaphore(runtime.settings.recovery.status_concurrency)
    async with runtime.status_gate:
        return await runtime.agents.status(
            endpoint, token, timeout=runtime.settings.recovery.status_timeout_seconds
        )


def _held_slots(found: AgentStatus | None, slots: int) -> list[tuple[str | None, bool]]:
    """What to hold of a busy or silent agent, as (item, whole) pairs: one slot per item it
    names when it serves several at once and names them all, else the whole agent."""
    if found is not None and slots > 1 and found.items and len(found.items) >= found.busy_slots:
        return [(str(item), False) for item in found.items]
    current = None if found is None else found.current
    return [(None if current is None else str(current), True)]


async def release_when_idle(
    runtime: Runtime, handle: PoolHandle, checkout: Checkout, *, item: str | None = None
) -> None:
    """Hold a restored agent until it reports idle (with ``item``, until that item is done);
    one that stops answering is lost. One that then names a lease (silent at the restart, and
    bound to a lease that is no longer Bound) is unbound before it goes back, as
    :func:`restore_held_agents` unbinds one that answered in time; unless the operator is
    paused by then, when the lease may be one the acting peer bound since (the agent goes back
    to the paused pool, whose restore on resuming asks it again)."""
    settings = runtime.settings.recovery
    watch = IdleWatch(silence_seconds=settings.silence_seconds)
    idle = await wait_until_idle(
        runtime.agents,
        checkout,
        handle.token,
        watch=watch,
        poll_seconds=settings.poll_seconds,
        status_timeout=settings.status_timeout_seconds,
        item=item,
    )
    if idle is not None and idle.lease is not None and not runtime.leases.paused:
        await unbind(runtime, handle, idle.lease)(checkout)
        return
    handle.broker.checkin(checkout, CheckinOutcome.LOST if idle is None else CheckinOutcome.SUCCESS)
