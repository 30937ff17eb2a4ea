"""Scenario 2: a warm pool against a fresh pod per item, as a Job or a ScaledJob would run them.

The same run (``items`` items at ``cap: 8`` through slow_start agents: 1.0 s start-up, 20 ms per
item) goes through pools of 8 created together with it: a warm one, and one with ``maxUses: 1``,
where every item gets a fresh pod that starts up, serves it and is retired; three such turns, the
one with the median ratio reported. Each makespan runs from the pool's creation to the run's
completion, so the warm pool pays its one start-up too.

The theoretical ratio counts only the agents' own time. Cold, every item costs a start-up and its
work, 8 at a time: ``items / 8 * (startup + work)``. Warm, the pool starts once and then only
works: ``startup + items * work / 8``. What the measured ratio has beyond it is the price of a pod:
process start, imports, the readiness probe, the operator replacing a retired agent.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench.harness import ROOT, Stage, pool_spec, wait_run

AGENTS = 8
CAP = 8
STARTUP_SECONDS = 1.0
WORK_SECONDS = 0.02
AGENT = ROOT / "examples" / "agents" / "slow_start.py"


def theoretical(items: int, *, startup: float, work: float, cap: int) -> dict[str, float]:
    """Makespans from the agents' own time only, and their ratio (cold over warm)."""
    cold = items / cap * (startup + work)
    warm = startup + items * work / cap
    return {"cold_s": cold, "warm_s": warm, "ratio": cold / warm}


async def makespan(stage: Stage, namespace: str, name: str, items: int, **pool: Any) -> float:
    """Seconds from creating the pool (with its run) to the run's completion."""
    env = {"SLOW_START_SECONDS": str(STARTUP_SECONDS), "WORK_SECONDS": str(WORK_SECONDS)}
    spec = pool_spec(AGENT, env=env, minSize=AGENTS, maxSize=AGENTS, **pool)
    run = {
        "poolRef": {"name": name},
        "cap": CAP,
        "checkoutTimeoutSeconds": 300,
        "source": {"items": [{"n": index} for index in range(items)]},
    }
    started = time.perf_counter()
    await stage.kube.create("agentpools", namespace, name, spec)
    await stage.kube.create("poolruns", namespace, name, run)
    ended = await wait_run(stage.kube, namespace, name, timeout=60 + items * 3.0)
    seconds = time.perf_counter() - started
    status = ended.get("status") or {}
    if status.get("succeeded") != items:
        raise RuntimeError(f"run {name} ended {status.get('phase')}: {status.get('message')}")
    await stage.kube.delete("agentpools", namespace, name)
    return seconds


async def run(work: Path, *, items: int, turns: int = 3) -> dict[str, Any]:
    """Scenario 2; the figures for results.json.

    One turn times a warm pool and then a pod per item, each from scratch. A single pool start
    or a single pod's start is swayed by the machine's load at that moment (in one morning the
    warm makespan ranged 2.9 to 4.2 s and the cold one 53 to 67 s), so ``turns`` turns are
    taken and the one with the median ratio is reported; every turn is kept beside it.
    """
    results = []
    async with Stage(work, "warm_vs_cold") as stage:
        namespace = await stage.kube.new_namespace("bench")
        for turn in range(turns):
            warm = await makespan(stage, namespace, f"warm-{turn}", items)
            cold = await makespan(stage, namespace, f"cold-{turn}", items, maxUses=1)
            results.append({"warm_s": round(warm, 3), "cold_s": round(cold, 3)})
    for result in results:
        result["ratio"] = round(result["cold_s"] / result["warm_s"], 2)
    chosen = sorted(results, key=lambda result: result["ratio"])[len(results) // 2]
    expected = theoretical(items, startup=STARTUP_SECONDS, work=WORK_SECONDS, cap=CAP)
    return {
        "warm_vs_cold": {
            "items": items,
            "cap": CAP,
            "startup_s": STARTUP_SECONDS,
            "work_s": WORK_SECONDS,
            "warm_s": chosen["warm_s"],
            "cold_s": chosen["cold_s"],
            "ratio": chosen["ratio"],
            "turns": results,
            "theoretical_warm_s": round(expected["warm_s"], 3),
            "theoretical_cold_s": round(expected["cold_s"], 3),
            "theoretical_ratio": round(expected["ratio"], 2),
            "formula": "cold = items/cap*(startup+work); warm = startup + items*work/cap",
        }
    }
