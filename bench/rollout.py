"""``python -m bench.rollout``: a rollout of a loaded pool, on the simulated cluster.

A pool of ``--agents`` agents (``minSize = maxSize``, maxSurge and maxUnavailable at their 25%
defaults) serves one PoolRun whose cap is the pool's size, every item taking
``--item-seconds``, so every agent is busy all the time. After ``--before`` seconds of that
steady run the pool's image changes, and the rollout is followed until Progressing says
RolloutComplete with every agent updated. It prints the items per second before the rollout
and during it, their ratio beside the target (at least 100% less maxUnavailable), the rollout's
duration, the fewest Ready agents and most pods seen, and the items that failed (must be 0).
The cluster is :mod:`bench.simcluster`: pods turn Ready without a process and one in-process
agent serves every pod. Figures are reported, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from agentpool.api.runs import MAX_INLINE_ITEMS
from agentpool.local.kubeconfig import ApiAccess
from bench.harness import ClusterProcess, Kube, OperatorProcess, until

NAMESPACE = "roll"
POOL = "roll"
RUN = "steady"
OLD_IMAGE, NEW_IMAGE = "agentpool:0.1.0", "agentpool:0.2.0"
#: maxUnavailable's default, as a fraction of the pool: the target is the rest of the pool.
MAX_UNAVAILABLE = 0.25
#: How often the pool and the run are read while the rollout goes on.
POLL_SECONDS = 0.25


async def _progress(kube: Kube) -> tuple[dict[str, Any], dict[str, Any]]:
    pool = await kube.get("agentpools", NAMESPACE, POOL)
    run = await kube.get("poolruns", NAMESPACE, RUN)
    return pool, run.get("status") or {}


def _complete(pool: dict[str, Any], agents: int) -> bool:
    status = pool.get("status") or {}
    generation = pool["metadata"].get("generation")
    progressing = next(
        (c for c in status.get("conditions") or [] if c["type"] == "Progressing"), {}
    )
    return (
        progressing.get("reason") == "RolloutComplete"
        and progressing.get("observedGeneration") == generation
        and status.get("updatedReplicas") == agents
        and status.get("replicas") == agents
    )


async def measure(work: Path, *, agents: int, item_seconds: float, before: float) -> dict[str, Any]:
    """One rollout of ``agents`` agents under a steady run; its figures."""
    cluster = ClusterProcess(work / "cluster", command=("-m", "bench.simcluster"))
    await asyncio.to_thread(cluster.start)
    operator = OperatorProcess(cluster.kubeconfig, work / "operator.log")
    session = aiohttp.ClientSession(trust_env=False)
    kube = Kube(ApiAccess.from_kubeconfig(cluster.kubeconfig))
    try:
        operator.start()
        await operator.wait_ready(session)
        await kube.new_namespace(NAMESPACE)
        size = {"minSize": agents, "maxSize": agents}
        await kube.create("agentpools", NAMESPACE, POOL, {"image": OLD_IMAGE, **size})

        async def settled() -> bool:
            pool = await kube.get("agentpools", NAMESPACE, POOL)
            return (pool.get("status") or {}).get("readyReplicas") == agents

        await until(settled, timeout=300, what="the pool ready", interval=0.5)
        # As many items as a run may hold inline: at 100 agents and 2 s an item, 200 s of work.
        items = MAX_INLINE_ITEMS
        run = {
            "poolRef": {"name": POOL},
            "cap": agents,
            "input": {"delaySeconds": item_seconds},
            "source": {"items": list(range(items))},
        }
        await kube.create("poolruns", NAMESPACE, RUN, run)

        async def warm() -> bool:
            _, status = await _progress(kube)
            return int(status.get("succeeded") or 0) >= agents

        await until(warm, timeout=120, what="the run at full speed", interval=POLL_SECONDS)
        _, status = await _progress(kube)
        start, done_start = time.monotonic(), int(status.get("succeeded") or 0)
        await asyncio.sleep(before)  # the steady window is a span of time, not a wait for state
        _, status = await _progress(kube)
        patched, done_patched = time.monotonic(), int(status.get("succeeded") or 0)
        rate_before = (done_patched - done_start) / (patched - start)

        await kube.patch("agentpools", NAMESPACE, POOL, {"image": NEW_IMAGE})
        fewest_ready, most_pods = agents, agents
        while True:
            pool, status = await _progress(kube)
            pool_status = pool.get("status") or {}
            fewest_ready = min(fewest_ready, int(pool_status.get("readyReplicas") or 0))
            most_pods = max(most_pods, int(pool_status.get("replicas") or 0))
            if _complete(pool, agents):
                break
            if status.get("phase") in ("Succeeded", "Failed"):
                raise RuntimeError("the run ended before the rollout: give fewer --item-seconds")
            if time.monotonic() - patched > 600:
                raise TimeoutError("the rollout did not complete in 600 s")
            await asyncio.sleep(POLL_SECONDS)
        ended, done_ended = time.monotonic(), int(status.get("succeeded") or 0)
        duration = ended - patched
        rate_during = (done_ended - done_patched) / duration
        ratio = rate_during / rate_before if rate_before else float("nan")
        return {
            "agents": agents,
            "item_seconds": item_seconds,
            "items_per_second_before": round(rate_before, 1),
            "items_per_second_during": round(rate_during, 1),
            "throughput_ratio": round(ratio, 3),
            "target_ratio": 1 - MAX_UNAVAILABLE,
            "rollout_seconds": round(duration, 1),
            "fewest_ready_agents": fewest_ready,
            "most_pods": most_pods,
            "items_failed": int(status.get("failed") or 0),
            "items_retrying": int(status.get("retrying") or 0),
        }
    finally:
        await kube.close()
        await session.close()
        await asyncio.to_thread(operator.stop)
        await asyncio.to_thread(cluster.stop)


async def run(work: Path, *, agents: int, item_seconds: float, before: float) -> dict[str, Any]:
    """The scenario for ``python -m bench``: its figures under ``rollout``."""
    return {"rollout": await measure(work, agents=agents, item_seconds=item_seconds, before=before)}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.rollout", description=__doc__)
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--item-seconds", type=float, default=2.0)
    parser.add_argument("--before", type=float, default=10.0, help="seconds of steady run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-rollout-") as work:
        figures = asyncio.run(
            measure(
                Path(work), agents=args.agents, item_seconds=args.item_seconds, before=args.before
            )
        )
    print(json.dumps(figures, indent=2))
    met = "met" if figures["throughput_ratio"] >= figures["target_ratio"] else "MISSED"
    print(
        f"rollout of {figures['agents']} agents in {figures['rollout_seconds']} s:"
        f" {figures['items_per_second_during']} items/s during vs"
        f" {figures['items_per_second_before']} before ="
        f" {figures['throughput_ratio']:.0%} (target >= {figures['target_ratio']:.0%}, {met});"
        f" Ready agents never below {figures['fewest_ready_agents']},"
        f" pods never above {figures['most_pods']}; {figures['items_failed']} items failed"
    )


if __name__ == "__main__":
    main()
