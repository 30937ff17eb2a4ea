"""Pools whose agents never turn Ready, or whose pods are refused: how many pods and requests?

agent-sandbox's runaway case, scaled down to run in about two minutes here: on the simulated
cluster (:mod:`bench.simcluster`), one operator and three phases of ``pools`` pools of
``minSize = per_pool``, each phase ``seconds`` long in a namespace of its own:

- unbounded: agents that never turn Ready (their readiness probe asks a path no agent serves)
  with ``maxUnready = per_pool``, as every pool started before the bound existed;
- bounded: the same with ``maxUnready = BOUND``;
- refused: a template with a typo (``comand:``) that the API server refuses.

For each it prints the pods created (answered pod creates, dry runs included), the pods that
exist at the end, the ratio of pods to ``pools x maxUnready``, pod creates per pool per minute
(the refused phase's back-off), and the operator's CPU seconds and peak RSS. Figures are
reported, never asserted.
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

from agentpool.local.kubeconfig import ApiAccess
from bench.harness import ClusterProcess, Kube, OperatorProcess, free_port
from bench.simulated import ECHO_SECONDS, IMAGE

#: maxUnready in the bounded phase: a small bound, far below per_pool.
BOUND = 2
PHASES = ("unbounded", "bounded", "refused")
NEVER_READY = {"httpGet": {"path": "/never-ready"}, "periodSeconds": 1}


def pool_specs(per_pool: int, bound: int = BOUND) -> dict[str, dict[str, Any]]:
    """The pool spec of each phase."""
    size = {"image": IMAGE, "minSize": per_pool, "maxSize": per_pool}
    typo = {"spec": {"containers": [{"name": "agent", "comand": ["agent"]}]}}
    return {
        "unbounded": {**size, "maxUnready": per_pool, "readinessProbe": NEVER_READY},
        "bounded": {**size, "maxUnready": bound, "readinessProbe": NEVER_READY},
        "refused": {**size, "maxUnready": bound, "template": typo},
    }


async def phase(
    kube: Kube,
    operator: OperatorProcess,
    *,
    name: str,
    spec: dict[str, Any],
    pools: int,
    seconds: float,
) -> dict[str, Any]:
    """Create ``pools`` pools of ``spec`` in namespace ``name`` and watch them ``seconds``."""
    await kube.new_namespace(name)
    before = await kube.counts()
    cpu = operator.cpu_seconds()
    began = time.monotonic()
    await asyncio.gather(
        *(kube.create("agentpools", name, f"p{i:03d}", spec) for i in range(pools))
    )
    rss = 0
    while time.monotonic() - began < seconds:
        rss = max(rss, operator.memory_kib("VmRSS"))
        await asyncio.sleep(1.0)
    elapsed = time.monotonic() - began
    after = await kube.counts()
    pods = sum([len(await kube.pods(name, f"p{i:03d}")) for i in range(pools)])
    creates = after["create", "pods"] - before["create", "pods"]
    bound = pools * spec["maxUnready"]
    return {
        "pools": pools,
        "min_size": spec["minSize"],
        "max_unready": spec["maxUnready"],
        "seconds": round(elapsed, 1),
        "pod_creates": creates,
        "pods_at_end": pods,
        "pods_per_bound": round(pods / bound, 2),
        "creates_per_pool_minute": round(creates / pools / (elapsed / 60), 1),
        "operator_cpu_seconds": round(operator.cpu_seconds() - cpu, 2),
        "operator_rss_mib": round(rss / 1024, 1),
    }


async def run_phases(
    work: Path,
    *,
    pools: int,
    per_pool: int,
    seconds: float,
    bound: int = BOUND,
    names: tuple[str, ...] = PHASES,
) -> dict[str, dict[str, Any]]:
    """The phases ``names`` on one simulated cluster and operator, each phase's figures."""
    directory = work / "runaway"
    cluster = ClusterProcess(
        directory / "cluster",
        command=("-m", "bench.simcluster"),
        options=("--delay", str(ECHO_SECONDS)),
    )
    operator = OperatorProcess(
        cluster.kubeconfig, directory / "operator.log", metrics_port=free_port()
    )
    session = aiohttp.ClientSession(trust_env=False)
    kube: Kube | None = None
    phases: dict[str, dict[str, Any]] = {}
    try:
        await asyncio.to_thread(cluster.start)
        kube = Kube(ApiAccess.from_kubeconfig(cluster.kubeconfig))
        operator.start()
        await operator.wait_ready(session)
        for name, spec in pool_specs(per_pool, bound).items():
            if name not in names:
                continue
            phases[name] = await phase(
                kube, operator, name=name, spec=spec, pools=pools, seconds=seconds
            )
            print(f"   {name}: {phases[name]}", flush=True)
    finally:
        if kube is not None:
            await kube.close()
        await session.close()
        await asyncio.to_thread(operator.stop)
        await asyncio.to_thread(cluster.stop)
    return phases


async def run(work: Path, *, pools: int, per_pool: int, seconds: float) -> dict[str, Any]:
    """The three phases on one simulated cluster and operator; the scenario's results."""
    phases = await run_phases(work, pools=pools, per_pool=per_pool, seconds=seconds)
    unbounded, bounded = phases["unbounded"], phases["bounded"]
    return {
        "runaway": {
            "pods_unbounded": unbounded["pods_at_end"],
            "pods_bounded": bounded["pods_at_end"],
            "pods_ratio": round(unbounded["pods_at_end"] / max(1, bounded["pods_at_end"]), 1),
            "refused_creates_per_pool_minute": phases["refused"]["creates_per_pool_minute"],
            "phases": phases,
        }
    }


def main() -> None:
    """``python -m bench.runaway``: chosen phases at a chosen scale, such as agent-sandbox's own
    case (500 pools of minSize 40 for five minutes, at the default maxUnready of 10)."""
    parser = argparse.ArgumentParser(prog="python -m bench.runaway", description=main.__doc__)
    parser.add_argument("--pools", type=int, default=500)
    parser.add_argument("--per-pool", type=int, default=40, help="each pool's minSize")
    parser.add_argument("--seconds", type=float, default=300.0, help="each phase's length")
    parser.add_argument("--max-unready", type=int, default=10, help="maxUnready when bounded")
    parser.add_argument("--phases", nargs="+", choices=PHASES, default=["bounded", "refused"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-runaway-") as work:
        phases = asyncio.run(
            run_phases(
                Path(work),
                pools=args.pools,
                per_pool=args.per_pool,
                seconds=args.seconds,
                bound=args.max_unready,
                names=tuple(args.phases),
            )
        )
    print(json.dumps(phases, indent=2))
    for name, figures in phases.items():
        bound = figures["pools"] * figures["max_unready"]
        print(
            f"{name}: {figures['pools']} pools of minSize {figures['min_size']}, maxUnready"
            f" {figures['max_unready']}, {figures['seconds']} s: {figures['pod_creates']} pod"
            f" creates, {figures['pods_at_end']} pods at the end (pools x maxUnready = {bound}),"
            f" {figures['creates_per_pool_minute']} creates per pool per minute; operator CPU"
            f" {figures['operator_cpu_seconds']} s, peak RSS {figures['operator_rss_mib']} MiB"
        )


if __name__ == "__main__":
    main()
