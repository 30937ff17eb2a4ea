"""Scenario 5: how fast the operator reacts: overflow, replacement, and a warm checkout.

- overflow: a pool of 1 to 2 echo agents whose one agent is held by a lease; a second lease
  makes a waiter, and the time runs from creating that lease to the overflow pod's appearance in
  the API (seen by a watch on pods). A fresh pool per sample, so each starts from the same state.
- replacement: in a pool of 2, one agent's processes are killed (SIGKILL, as an out-of-memory
  kill would); the time runs from the kill to the replacement pod's appearance in the API.
- warm checkout: a run of ``items`` items at ``cap: 4`` on a pool of 8, so an idle agent always
  waits; the latency comes from the operator's ``agentpool_checkout_seconds`` histogram (served
  with ``--metrics-port``), as the upper bound of the bucket the percentile falls in.
"""

from __future__ import annotations

import math
import os
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp

from agentpool.local.kubelet.processes import pod_processes
from bench.harness import (
    ROOT,
    Stage,
    Watcher,
    free_port,
    is_ready,
    percentile,
    pool_spec,
    wait_pool_ready,
    wait_run,
)

AGENT = ROOT / "bench" / "echo_agent.py"
LEASES = "/apis/agentpool.dev/v1alpha1/namespaces/{}/agentleases"


def bound(obj: dict[str, Any]) -> bool:
    return (obj.get("status") or {}).get("phase") == "Bound"


async def overflow_sample(stage: Stage, namespace: str, index: int) -> float:
    kube = stage.kube
    pool = f"overflow-{index}"
    await kube.create("agentpools", namespace, pool, pool_spec(AGENT, minSize=1, maxSize=2))
    await wait_pool_ready(kube, namespace, pool, 1, timeout=60)
    pods = Watcher(
        kube, f"/api/v1/namespaces/{namespace}/pods?labelSelector=agentpool.dev/pool={pool}"
    )
    leases = Watcher(kube, LEASES.format(namespace))
    await pods.start()
    await leases.start()
    try:
        holder = {"poolRef": {"name": pool}, "ttlSeconds": 300}
        await kube.create("agentleases", namespace, f"{pool}-a", holder)
        await leases.wait(lambda n, o: n == f"{pool}-a" and bound(o), timeout=30, what="a lease")
        known = set(pods.first)
        started = time.monotonic()
        await kube.create("agentleases", namespace, f"{pool}-b", holder)
        at, _ = await pods.wait(lambda n, o: n not in known, timeout=30, what="an overflow pod")
        return (at - started) * 1000
    finally:
        await pods.stop()
        await leases.stop()


async def replacement_sample(stage: Stage, namespace: str, index: int) -> float:
    kube = stage.kube
    pool = f"replace-{index}"
    await kube.create("agentpools", namespace, pool, pool_spec(AGENT, minSize=2, maxSize=2))
    await wait_pool_ready(kube, namespace, pool, 2, timeout=60)
    pods = Watcher(
        kube, f"/api/v1/namespaces/{namespace}/pods?labelSelector=agentpool.dev/pool={pool}"
    )
    await pods.start()
    try:
        known = set(pods.first)
        victim = next(p for p in pods.objects.values() if is_ready(p))
        pids = pod_processes(victim["status"]["podIP"])
        if not pids:
            raise RuntimeError(f"no process found for pod {victim['metadata']['name']}")
        started = time.monotonic()
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        at, _ = await pods.wait(lambda n, o: n not in known, timeout=60, what="a replacement pod")
        return (at - started) * 1000
    finally:
        await pods.stop()


def histogram_quantile(buckets: list[tuple[float, float]], q: float) -> float:
    """The upper bound of the bucket holding the ``q`` quantile of a cumulative histogram."""
    total = buckets[-1][1] if buckets else 0
    if not total:
        return float("nan")
    for bound_, count in buckets:
        if count >= q * total:
            return bound_
    return math.inf


async def checkout_histogram(port: int, namespace: str) -> list[tuple[float, float]]:
    """Cumulative (le, count) of the operator's checkout latency for ``namespace``, all kinds."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        text = await response.text()
    sums: dict[float, float] = {}
    for line in text.splitlines():
        if not line.startswith("agentpool_checkout_seconds_bucket{"):
            continue
        labels, value = line.rsplit(" ", 1)
        if f'namespace="{namespace}"' not in labels:
            continue
        le = labels.split('le="', 1)[1].split('"', 1)[0]
        key = math.inf if le == "+Inf" else float(le)
        sums[key] = sums.get(key, 0.0) + float(value)
    return sorted(sums.items())


async def run(work: Path, *, samples: int, items: int) -> dict[str, Any]:
    """Scenario 5; the figures for results.json and the samples for the plots."""
    port = free_port()
    async with Stage(work, "reactivity", metrics_port=port) as stage:
        kube = stage.kube
        namespace = await kube.new_namespace("bench")
        overflow = [await overflow_sample(stage, namespace, i) for i in range(samples)]
        replacement = [await replacement_sample(stage, namespace, i) for i in range(samples)]
        warm = await kube.new_namespace("warm")
        await kube.create("agentpools", warm, "echo", pool_spec(AGENT, minSize=8, maxSize=8))
        await wait_pool_ready(kube, warm, "echo", 8, timeout=60)
        run_spec = {"poolRef": {"name": "echo"}, "cap": 4, "source": {"items": list(range(items))}}
        await kube.create("poolruns", warm, "warm", run_spec)
        await wait_run(kube, warm, "warm", timeout=60 + items)
        buckets = await checkout_histogram(port, warm)
    return {
        "reactivity": {
            "samples": samples,
            "overflow_ms": round(percentile(overflow, 50), 1),
            "overflow_max_ms": round(max(overflow), 1),
            "replacement_ms": round(percentile(replacement, 50), 1),
            "replacement_max_ms": round(max(replacement), 1),
            "checkouts": int(buckets[-1][1]) if buckets else 0,
            "checkout_p50_ms": round(histogram_quantile(buckets, 0.50) * 1000, 2),
            "checkout_p99_ms": round(histogram_quantile(buckets, 0.99) * 1000, 2),
            "checkout_note": "upper bound of the histogram bucket holding the percentile",
        },
        "_samples": {"overflow_ms": overflow, "replacement_ms": replacement},
    }
