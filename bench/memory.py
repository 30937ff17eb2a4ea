"""Benchmark: the local API server's memory over a long session of runs, bounded and not.

For ``--minutes`` each, on a fresh local cluster (``agentpool local up --no-operator``, the API
server and kubelet in one process) and operator, it runs PoolRuns back to back through a pool of
echo agents: first one large run (``--large`` inline items, the most the CRD admits by default),
then runs of ``--items`` items whose outputs fill the status to its budget, so every status write
is a large object, each deleted when it ends. Every ``--every`` seconds it samples the resident
memory (``VmRSS``) of the cluster's process, and prints the samples and the peak (``VmHWM``).

It does this with the history bounds of this version (``bounded``: 5 minutes, 32 MiB and 10,000
events per resource) and, unless ``--no-baseline``, with the old count-only history
(``count-only``: 10,000 events of any age and size), so both are measured on the same machine in
the same run. Prints the figures and writes them to ``bench/out/memory.json``. Not a test: it
asserts nothing.

    .venv/bin/python -m bench.memory [--minutes 2] [--no-baseline]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from agentpool.api.runs import MAX_INLINE_ITEMS
from bench.harness import ROOT, Kube, Stage, finished, pool_spec, until, wait_pool_ready

OUT = ROOT / "bench" / "out" / "memory.json"
AGENT = ROOT / "bench" / "echo_agent.py"
AGENTS = 4
CAP = 8
PAYLOAD = "x" * 200
#: ``agentpool local up`` options of each configuration; the old history keeps whatever it logs.
CONFIGURATIONS = {
    "bounded": (),
    "count-only": ("--history-seconds", "0", "--history-mib", "0"),
}


def memory_mib(pid: int, field: str) -> float:
    """A ``/proc/PID/status`` figure (``VmRSS``, ``VmHWM``) in MiB."""
    text = Path(f"/proc/{pid}/status").read_text()
    match = re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE)
    return int(match.group(1)) / 1024 if match else 0.0


async def run_once(
    kube: Kube, namespace: str, name: str, items: int, *, text: str = PAYLOAD
) -> None:
    """One PoolRun of ``items`` inline items, followed to its end and then deleted."""
    work = [{"id": f"{name}-{n:05d}", "text": text} for n in range(items)]
    spec = {"poolRef": {"name": "echo"}, "cap": CAP, "itemId": "id", "source": {"items": work}}
    await kube.create("poolruns", namespace, name, spec)

    async def ended() -> bool:
        return finished(await kube.get("poolruns", namespace, name))

    await until(ended, timeout=600, what=f"run {name} to end", interval=0.5)
    await kube.delete("poolruns", namespace, name)


async def sample(pid: int, started: float, every: float, into: list[tuple[float, float]]) -> None:
    """Append (seconds, RSS MiB) every ``every`` seconds until cancelled, printing each."""
    while True:
        at, rss = time.monotonic() - started, memory_mib(pid, "VmRSS")
        into.append((round(at, 1), round(rss, 1)))
        print(f"  {at:7.0f} s  {rss:8.1f} MiB", flush=True)
        await asyncio.sleep(every)


async def measure(work: Path, name: str, options: tuple[str, ...], args: Any) -> dict[str, Any]:
    """Runs back to back for ``args.minutes`` on a cluster started with ``options``."""
    print(f"{name}: runs for {args.minutes:g} minutes", flush=True)
    async with Stage(work, name, cluster=options) as stage:
        process = stage.cluster.process
        assert process is not None
        kube = stage.kube
        namespace = await kube.new_namespace("bench")
        await kube.create("agentpools", namespace, "echo", pool_spec(AGENT, minSize=AGENTS))
        await wait_pool_ready(kube, namespace, "echo", AGENTS, timeout=120)
        started = time.monotonic()
        samples: list[tuple[float, float]] = []
        sampler = asyncio.create_task(sample(process.pid, started, args.every, samples))
        runs, items = 0, 0
        try:
            # Short items: 10,000 of the usual ones would pass the 1.5 MiB a stored object may
            # take (etcd's request limit, which the local API server keeps too).
            await run_once(kube, namespace, "large", args.large, text="")
            runs, items = 1, args.large
            while time.monotonic() - started < args.minutes * 60:
                await run_once(kube, namespace, f"run-{runs}", args.items)
                runs, items = runs + 1, items + args.items
        finally:
            sampler.cancel()
        final = memory_mib(process.pid, "VmRSS")
        peak = memory_mib(process.pid, "VmHWM")
    figures = {
        "runs": runs,
        "items": items,
        "seconds": round(time.monotonic() - started),
        "peak_rss_mib": round(peak, 1),
        "final_rss_mib": round(final, 1),
        "samples": samples,
    }
    print(f"{name}: {runs} runs, {items} items, peak {peak:.0f} MiB, final {final:.0f} MiB")
    return figures


async def measure_all(args: Any) -> dict[str, Any]:
    chosen = {k: v for k, v in CONFIGURATIONS.items() if args.baseline or k == "bounded"}
    with tempfile.TemporaryDirectory(prefix="agentpool-bench-memory-") as directory:
        return {
            name: await measure(Path(directory), name, options, args)
            for name, options in chosen.items()
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=2.0, help="per configuration")
    parser.add_argument("--items", type=int, default=1000, help="items of each later run")
    parser.add_argument("--large", type=int, default=MAX_INLINE_ITEMS, help="the first run's")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    parser.add_argument(
        "--no-baseline",
        dest="baseline",
        action="store_false",
        help="measure only this version's history, not also the old count-only one",
    )
    args = parser.parse_args()
    figures = asyncio.run(measure_all(args))
    print()
    print(f"{'history':<12} {'runs':>5} {'items':>7} {'peak MiB':>9} {'final MiB':>10}")
    for name, found in figures.items():
        print(
            f"{name:<12} {found['runs']:>5} {found['items']:>7} "
            f"{found['peak_rss_mib']:>9} {found['final_rss_mib']:>10}"
        )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
