"""Agents with several slots: 4 pods of 8 slots against 4 of one slot and 32 of one, in one run.

Each pool serves a PoolRun at ``cap: 32`` of sleeping agents (``bench/sleep_agent.py``: 100 ms a
item, waiting as a model API call does, no CPU). The ideal throughput of a pool is its slots over
the item's time, ``slots * pods / 0.1 s``: 320 items/s for 4 pods of 8 slots and for 32 pods of
one, 40 items/s for 4 pods of one, so slots 8 should serve 8 times what slots 1 does on the
same pods. Reported:

- throughput on the agents: items over the span from the first item's start to the last one's
  end, and its ratio to the ideal (``slots.ratio_to_ideal``, the 4x8 pool's; target >= 0.85);
- the speed-up of slots 8 over slots 1 on the same 4 pods (ideal 8) and the 4x8 pool against 32
  one-slot pods (ideal 1);
- per-item overhead: on each agent, the time a slot stays free between one item's end and the
  start of the item that takes it next (with several slots, the n-th start after the first
  ``slots`` takes the slot the (n - slots)-th end freed), p50/p95/p99. It is what the operator
  and the protocol add to each item: the HTTP round trip, checkin, record, the next checkout.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.harness import ROOT, Stage, percentile, pool_spec, wait_pool_ready, wait_run

AGENT = ROOT / "bench" / "sleep_agent.py"
SLEEP_SECONDS = 0.1
CAP = 32
#: (name, pods, slots) of the pools compared, in the order they run.
POOLS = (("wide", 4, 8), ("narrow", 4, 1), ("many", 32, 1))
TARGET = 0.85


def read_timings(path: Path, run: str) -> list[tuple[int, int, int]]:
    """(pid, start_ns, end_ns) of every item the agents handled for ``run``."""
    rows = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 5 and parts[1] == run:
            rows.append((int(parts[0]), int(parts[3]), int(parts[4])))
    return rows


def slot_gaps_ms(rows: list[tuple[int, int, int]], slots: int) -> list[float]:
    """On each agent, how long each freed slot stayed free before the next item took it."""
    by_agent: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for pid, start, end in rows:
        by_agent[pid].append((start, end))
    gaps = []
    for spans in by_agent.values():
        starts = sorted(start for start, _ in spans)
        ends = sorted(end for _, end in spans)
        gaps += [(starts[n] - ends[n - slots]) / 1e6 for n in range(slots, len(starts))]
    return gaps


def figures(rows: list[tuple[int, int, int]], *, pods: int, slots: int) -> dict[str, Any]:
    """Throughput, its ratio to the ideal, and the slot gaps of one pool's run."""
    span = (max(r[2] for r in rows) - min(r[1] for r in rows)) / 1e9
    rate = len(rows) / span
    ideal = slots * pods / SLEEP_SECONDS
    gaps = slot_gaps_ms(rows, slots)
    return {
        "pods": pods,
        "slots": slots,
        "items": len(rows),
        "agent_span_s": round(span, 3),
        "items_per_second": round(rate, 1),
        "ideal_items_per_second": round(ideal, 1),
        "ratio_to_ideal": round(rate / ideal, 3),
        "agents_used": len({r[0] for r in rows}),
        "gap_p50_ms": round(percentile(gaps, 50), 3),
        "gap_p95_ms": round(percentile(gaps, 95), 3),
        "gap_p99_ms": round(percentile(gaps, 99), 3),
    }


async def serve(
    stage: Stage, namespace: str, name: str, *, pods: int, slots: int, items: int
) -> dict[str, Any]:
    """Start the pool, run ``items`` through it at cap 32, delete it; its figures."""
    timings = stage.dir / "timings.txt"
    env = {"TIMINGS_FILE": str(timings), "SLEEP_SECONDS": str(SLEEP_SECONDS)}
    spec = pool_spec(AGENT, env=env, minSize=pods, maxSize=pods, slots=slots)
    kube = stage.kube
    await kube.create("agentpools", namespace, name, spec)
    await wait_pool_ready(kube, namespace, name, pods, timeout=60 + pods * 5)
    run = {
        "poolRef": {"name": name},
        "cap": CAP,
        "itemId": "id",
        "checkoutTimeoutSeconds": 300,
        "source": {"items": [{"id": f"i{n}"} for n in range(items)]},
    }
    await kube.create("poolruns", namespace, name, run)
    ended = await wait_run(kube, namespace, name, timeout=60 + items * SLEEP_SECONDS)
    status = ended.get("status") or {}
    if status.get("succeeded") != items:
        raise RuntimeError(f"run {name} ended {status.get('phase')}: {status.get('message')}")
    await kube.delete("agentpools", namespace, name)
    return figures(read_timings(timings, name), pods=pods, slots=slots)


async def run(work: Path, *, items: int) -> dict[str, Any]:
    """The slots scenario; the figures for results.json. ``items`` go through each pool of 320
    items/s ideal, an eighth of them through the pool of 4 one-slot pods (40 items/s ideal), so
    each run takes about as long."""
    found: dict[str, dict[str, Any]] = {}
    async with Stage(work, "slots") as stage:
        namespace = await stage.kube.new_namespace("bench")
        for name, pods, slots in POOLS:
            count = items if pods * slots >= CAP else max(CAP, items // 8)
            found[name] = await serve(stage, namespace, name, pods=pods, slots=slots, items=count)
    wide, narrow, many = found["wide"], found["narrow"], found["many"]
    rate = wide["items_per_second"]
    return {
        "slots": {
            "cap": CAP,
            "sleep_ms": SLEEP_SECONDS * 1000,
            "ratio_to_ideal": wide["ratio_to_ideal"],
            "items_per_second": rate,
            "speedup_over_one_slot": round(rate / narrow["items_per_second"], 2),
            "ratio_to_32_pods": round(rate / many["items_per_second"], 3),
            "overhead_p50_ms": wide["gap_p50_ms"],
            "overhead_p95_ms": wide["gap_p95_ms"],
            "overhead_p99_ms": wide["gap_p99_ms"],
            "pools": found,
            "formula": "ideal = slots * pods / 0.1 s; ratio = measured / ideal",
        }
    }
