"""Scenario 6: how long an AgentLease takes to bind, from its creation to ``status.phase: Bound``.

A pool of 4 echo agents, all Ready; leases are created one at a time, each followed by a watch
until it is Bound, then deleted, which returns its agent to the pool before the next one.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any

from bench.harness import ROOT, Stage, Watcher, percentile, pool_spec, wait_pool_ready

AGENT = ROOT / "bench" / "echo_agent.py"


def is_bound(wanted: str, name: str, obj: dict[str, Any]) -> bool:
    return name == wanted and (obj.get("status") or {}).get("phase") == "Bound"


async def run(work: Path, *, leases: int) -> dict[str, Any]:
    """Scenario 6; the figures for results.json and the samples for the plots."""
    async with Stage(work, "lease") as stage:
        kube = stage.kube
        namespace = await kube.new_namespace("bench")
        await kube.create("agentpools", namespace, "echo", pool_spec(AGENT, minSize=4, maxSize=4))
        await wait_pool_ready(kube, namespace, "echo", 4, timeout=60)
        watcher = Watcher(kube, f"/apis/agentpool.dev/v1alpha1/namespaces/{namespace}/agentleases")
        await watcher.start()
        latencies = []
        try:
            for index in range(leases):
                name = f"lease-{index}"
                started = time.monotonic()
                await kube.create("agentleases", namespace, name, {"poolRef": {"name": "echo"}})
                at, _ = await watcher.wait(
                    functools.partial(is_bound, name),
                    timeout=30,
                    what=f"lease {name} bound",
                )
                latencies.append((at - started) * 1000)
                await kube.delete("agentleases", namespace, name)
        finally:
            await watcher.stop()
    return {
        "lease": {
            "leases": leases,
            "p50_ms": round(percentile(latencies, 50), 1),
            "p99_ms": round(percentile(latencies, 99), 1),
            "max_ms": round(max(latencies), 1),
        },
        "_samples": {"lease_ms": latencies},
    }
