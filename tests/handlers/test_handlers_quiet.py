"""A steady pool costs the operator next to nothing: its loop looks at it once in five minutes, not
every few seconds, and wakes at once when something happens to it (its first checkout, a pod
event); while its agents are busy it passes as often as before, so its demand is sampled."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

import kopf
import pytest
from kopf._cogs.aiokits import aioenums
from leasefakes import kopf_context
from poolfakes import PodsKube, pool_handle, runtime_of

from agentpool.handlers import pools
from agentpool.handlers.runtime import PoolHandle, Runtime
from agentpool.settings import PoolSettings

POOL = {
    "apiVersion": "agentpool.dev/v1alpha1",
    "kind": "AgentPool",
    "metadata": {"name": "p", "namespace": "ns", "uid": "pool-uid", "generation": 1},
    "spec": {"image": "agent:1", "minSize": 2},
}


def turned_ready(pod: dict[str, Any], ip: str) -> dict[str, Any]:
    """``pod`` as the kubelet reports it once its readiness probe passed."""
    ready = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-07T09:00:01Z"}
    return {**pod, "status": {"phase": "Running", "podIP": ip, "conditions": [ready]}}


def served(runtime: Runtime) -> PoolHandle:
    kopf_context()
    handle = pool_handle(2)
    handle.broker.on_change = handle.wake.set  # as start_pool makes it
    handle.secret_checked_at = float("inf")  # no token Secret to look after here
    handle.settings = dataclasses.replace(PoolSettings(), status_interval_seconds=0)
    runtime.pools.serve(handle)
    return handle


@pytest.mark.looptime
async def test_a_steady_pool_is_looked_at_once_in_five_minutes_and_woken_by_its_first_checkout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two agents Ready and free: the loop passes once in five minutes (not every 5 s); a checkout
    wakes it at once, and while the agent is busy it passes every 5 s again."""
    kube = PodsKube()
    runtime = runtime_of(kube)
    handle = served(runtime)
    loop = asyncio.get_running_loop()
    passes: list[float] = []
    passed = asyncio.Event()
    reconcile = pools.reconcile

    async def counted(*args: Any) -> float:
        passes.append(loop.time())
        try:
            return await reconcile(*args)
        finally:
            passed.set()

    async def until(condition: Callable[[], bool]) -> None:
        async with asyncio.timeout(10):
            while not condition():
                passed.clear()
                await passed.wait()

    monkeypatch.setattr(pools, "reconcile", counted)
    stopper: aioenums.FlagSetter[kopf.DaemonStoppingReason] = aioenums.FlagSetter()
    stopped = aioenums.AsyncFlagWaiter(stopper)
    running = asyncio.ensure_future(pools.run_passes(runtime, handle, kopf.Body(POOL), stopped))
    try:
        await until(lambda: len(kube.created) == 2)
        for n, pod in enumerate(kube.created):
            handle.pods[pod["metadata"]["name"]] = turned_ready(pod, f"10.0.0.{n + 1}")
        handle.poke()  # the pod events
        await until(lambda: handle.quiet)
        before = len(passes)
        await asyncio.sleep(900)
        quiet_passes = passes[before:]
        assert 2 <= len(quiet_passes) <= 4, quiet_passes  # every 300 s, where 5 s made 180

        checkout = await handle.broker.checkout(timeout=1, holder="x")
        woken_at, before = loop.time(), len(passes)
        await asyncio.sleep(0.5)
        assert passes[before:]
        assert passes[before] - woken_at < 0.5
        assert not handle.quiet
        await asyncio.sleep(30)
        assert len(passes[before:]) >= 6  # busy: every 5 s
        handle.broker.checkin(checkout)
    finally:
        stopper.set(kopf.DaemonStoppingReason.OPERATOR_EXITING)
        handle.wake.set()
        await running
