"""Scenario 13: a warm schedule opening: from the window's start to the raised count Ready.

A pool of 1 echo agent gets a window that opens at the next whole minute (at least a few seconds
away) and asks for ``size`` agents. A watch on the pool's pods notes when the first new pod
appears and when the last of ``size`` turns Ready; both are measured from the window's start
on the wall clock. The pool's own measured cold start (status.coldStartSeconds) is reported
beside them, with the ratio of window-to-Ready over it: near 1 means the pool spends on top of
an agent's own start-up only the time to notice the window, which wakes it at the edge.
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.harness import ROOT, Stage, Watcher, is_ready, pool_spec, wait_pool_ready

AGENT = ROOT / "bench" / "echo_agent.py"
#: The least time between creating the pool and its window's start: the pool is Ready first.
LEAD_SECONDS = 8.0


def next_minute(after: float) -> float:
    """The first whole minute at least ``LEAD_SECONDS`` after ``after``, in seconds since the
    epoch."""
    return math.ceil((after + LEAD_SECONDS) / 60) * 60


async def sample(stage: Stage, namespace: str, index: int, *, size: int) -> dict[str, float]:
    kube = stage.kube
    pool = f"sched-{index}"
    opens = next_minute(time.time())
    at = datetime.fromtimestamp(opens, tz=UTC)
    window = {
        "name": "burst",
        "start": f"{at.minute} {at.hour} * * *",
        "durationSeconds": 600,
        "minSize": size,
    }
    await kube.create(
        "agentpools", namespace, pool, pool_spec(AGENT, minSize=1, schedules=[window])
    )
    await wait_pool_ready(kube, namespace, pool, 1, timeout=60)
    pods = Watcher(
        kube, f"/api/v1/namespaces/{namespace}/pods?labelSelector=agentpool.dev/pool={pool}"
    )
    await pods.start()
    try:
        known = set(pods.objects)
        # The window's start on the monotonic clock the watch notes its times by.
        opens_mono = time.monotonic() + (opens - time.time())
        created, _ = await pods.wait(
            lambda n, o: n not in known, timeout=120, what="a pod for the window"
        )
        # The agent already Ready was listed, not watched: it counts from the start.
        ready = {name for name, obj in pods.objects.items() if is_ready(obj)}

        def all_ready(name: str, obj: dict[str, Any]) -> bool:
            if is_ready(obj):
                ready.add(name)
            return len(ready) >= size

        done, _ = await pods.wait(all_ready, timeout=120, what=f"{size} Ready agents")
    finally:
        await pods.stop()
    status = (await kube.get("agentpools", namespace, pool)).get("status") or {}
    return {
        "created_ms": (created - opens_mono) * 1000,
        "ready_ms": (done - opens_mono) * 1000,
        "cold_start_ms": float(status.get("coldStartSeconds") or 0.0) * 1000,
    }


async def run(work: Path, *, samples: int, size: int = 4) -> dict[str, Any]:
    """Scenario 13; the figures for results.json."""
    async with Stage(work, "schedules") as stage:
        namespace = await stage.kube.new_namespace("sched")
        found = [await sample(stage, namespace, i, size=size) for i in range(samples)]
    created = sorted(s["created_ms"] for s in found)
    ready = sorted(s["ready_ms"] for s in found)
    cold = sorted(s["cold_start_ms"] for s in found)
    middle = len(found) // 2
    return {
        "schedule": {
            "samples": samples,
            "size": size,
            "window_to_first_pod_ms": round(created[middle], 1),
            "window_to_ready_ms": round(ready[middle], 1),
            "window_to_ready_max_ms": round(ready[-1], 1),
            "cold_start_ms": round(cold[middle], 1),
            "ready_over_cold_start": round(ready[middle] / cold[middle], 2)
            if cold[middle]
            else None,
        }
    }
