"""Scenario 10: fifty runs at once on one pool, with mixed priorities.

One pool of 4 agents (:mod:`bench.priority_agent`: an echo that sleeps ``WORK_SECONDS`` a
item) serves 50 PoolRuns created one after another, priorities 2, 1, 0 in turn, each with
``ITEMS`` items at ``cap: 2``, so 100 checkouts want 4 agents. The agents' start-up waits on a
gate file, which the bench opens only once the pool's status counts every run's checkouts as
waiting: from then on who is served first is the broker's choice alone.

The agents note each item's start and end (wall clock). For each run, a slot falls free when
the gate opens (its first ``cap`` slots) and whenever one of its items ends; matching the run's
free slots in order with its item starts gives each wait, and the longest is the run's. The
checks, each with a tolerance for the time between an agent finishing and the operator handing
out its next item (``TOLERANCE_SECONDS``):

- an inversion: an item started while a slot of a run of higher priority had been waiting for
  longer than the tolerance, and stayed waiting past it;
- a FIFO break: among runs of one priority, an item started while a slot that fell free clearly
  earlier (or, at the gate, a slot of a run created earlier) stayed waiting past the tolerance;
- starvation: a run that did not finish, or waited longer than the whole of the work ahead of it.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import ROOT, Stage, Watcher, finished, pool_spec, until

AGENTS = 4
RUNS = 50
ITEMS = 10
CAP = 2
LEVELS = (2, 1, 0)
WORK_SECONDS = 0.05
TOLERANCE_SECONDS = 0.1
AGENT = ROOT / "bench" / "priority_agent.py"
NAMESPACE, POOL = "bench", "prio"


@dataclass
class RunView:
    """One run as the agents saw it: when its slots fell free and when its items started."""

    name: str
    order: int
    priority: int
    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)

    def slots(self, opened: float) -> list[tuple[float, float, bool]]:
        """(fell free, served, at the gate) for each item, matched in order."""
        frees = sorted([opened] * CAP + self.ends)
        return [
            (free, start, index < CAP)
            for index, (free, start) in enumerate(zip(frees, sorted(self.starts), strict=False))
        ]

    def longest_wait(self, opened: float) -> float:
        return max((start - free for free, start, _ in self.slots(opened)), default=0.0)


def priority_of(order: int) -> int:
    return LEVELS[order % len(LEVELS)]


def read_views(path: Path, names: list[str]) -> dict[str, RunView]:
    views = {name: RunView(name, n, priority_of(n)) for n, name in enumerate(names)}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 5 and parts[1] in views:
            views[parts[1]].starts.append(int(parts[3]) / 1e9)
            views[parts[1]].ends.append(int(parts[4]) / 1e9)
    return views


def ahead(x: RunView, fx: float, gx: bool, y: RunView, fy: float, gy: bool) -> bool:
    """Whether slot X of equal priority should be served before slot Y: it fell free clearly
    earlier, or both waited from the gate and X's run was created first."""
    if gx and gy:
        return x.order < y.order
    return fx + TOLERANCE_SECONDS <= fy


def breaks(views: dict[str, RunView], opened: float) -> tuple[int, int]:
    """Item starts served out of order: (priority inversions, FIFO breaks within a priority)."""
    slots = [(view, *slot) for view in views.values() for slot in view.slots(opened)]
    inversions = fifo = 0
    for y, fy, sy, gy in slots:
        inverted = broken = False
        for x, fx, sx, gx in slots:
            # X waited when Y was served, and still did past the tolerance.
            if x is y or not (fx + TOLERANCE_SECONDS <= sy and sx >= sy + TOLERANCE_SECONDS):
                continue
            if x.priority > y.priority:
                inverted = True
            elif x.priority == y.priority and ahead(x, fx, gx, y, fy, gy):
                broken = True
        inversions += inverted
        fifo += broken
    return inversions, fifo


def table(views: dict[str, RunView], opened: float) -> str:
    lines = [f"{'run':<10}{'priority':>9}{'items':>7}{'first start':>13}{'finish':>9}{'wait':>8}"]
    for view in sorted(views.values(), key=lambda v: (-v.priority, v.order)):
        first = min(view.starts, default=float("nan")) - opened
        last = max(view.ends, default=float("nan")) - opened
        lines.append(
            f"{view.name:<10}{view.priority:>9}{len(view.starts):>7}{first:>13.3f}{last:>9.3f}"
            f"{view.longest_wait(opened):>8.3f}"
        )
    return "\n".join(lines)


async def run(work: Path, *, runs: int = RUNS) -> dict[str, Any]:
    """Scenario 10; the figures for results.json."""
    async with Stage(work, "priorities") as stage:
        kube = stage.kube
        timings, gate = stage.dir / "timings.txt", stage.dir / "gate"
        await kube.new_namespace(NAMESPACE)
        env = {
            "TIMINGS_FILE": str(timings),
            "GATE_FILE": str(gate),
            "WORK_SECONDS": str(WORK_SECONDS),
        }
        await kube.create("agentpools", NAMESPACE, POOL, pool_spec(AGENT, env=env, minSize=AGENTS))
        watched = Watcher(kube, f"/apis/agentpool.dev/v1alpha1/namespaces/{NAMESPACE}/poolruns")
        await watched.start()
        names = [f"run-{n:02d}" for n in range(runs)]
        for n, name in enumerate(names):
            items = [{"id": f"{name}-{i}"} for i in range(ITEMS)]
            spec = {"poolRef": {"name": POOL}, "priority": priority_of(n), "cap": CAP}
            spec |= {"itemId": "id", "checkoutTimeoutSeconds": 600, "source": {"items": items}}
            await kube.create("poolruns", NAMESPACE, name, spec)
        expected = runs * min(CAP, ITEMS)

        async def queued() -> int:
            pool = await kube.get("agentpools", NAMESPACE, POOL)
            waiting = int((pool.get("status") or {}).get("waiting") or 0)
            return waiting if waiting >= expected else 0

        try:
            waiting = await until(queued, timeout=120, what="every checkout queued", interval=0.2)
        except TimeoutError:
            waiting = int(
                ((await kube.get("agentpools", NAMESPACE, POOL)).get("status") or {}).get("waiting")
                or 0
            )
        gate.touch()
        deadline = time.monotonic() + 120 + runs * ITEMS * WORK_SECONDS * 4
        while not all(finished(watched.objects.get(name, {})) for name in names):
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        phases = {
            name: (watched.objects.get(name, {}).get("status") or {}).get("phase") for name in names
        }
        await watched.stop()
    views = read_views(timings, names)
    opened = min(start for view in views.values() for start in view.starts)
    inversions, fifo = breaks(views, opened)
    waits = {name: view.longest_wait(opened) for name, view in views.items()}
    span = max(end for view in views.values() for end in view.ends) - opened
    by_level: dict[int, float] = defaultdict(float)
    for view in views.values():
        by_level[view.priority] = max(by_level[view.priority], waits[view.name])
    unfinished = [name for name, phase in phases.items() if phase != "Succeeded"]
    print(table(views, opened), flush=True)
    return {
        "priorities": {
            "runs": runs,
            "agents": AGENTS,
            "items_per_run": ITEMS,
            "cap": CAP,
            "levels": list(LEVELS),
            "work_seconds": WORK_SECONDS,
            "tolerance_seconds": TOLERANCE_SECONDS,
            "queued_before_gate": waiting,
            "expected_queued": expected,
            "max_wait_seconds": round(max(waits.values()), 3),
            "max_wait_by_priority": {str(k): round(v, 3) for k, v in sorted(by_level.items())},
            "span_seconds": round(span, 3),
            "inversions": inversions,
            "fifo_breaks": fifo,
            "unfinished": unfinished,
            "starved": len(unfinished) + sum(1 for w in waits.values() if w > span),
            "table": [
                {
                    "run": view.name,
                    "priority": view.priority,
                    "items": len(view.starts),
                    "first_start": round(min(view.starts) - opened, 3) if view.starts else None,
                    "finish": round(max(view.ends) - opened, 3) if view.ends else None,
                    "longest_wait": round(waits[view.name], 3),
                }
                for view in sorted(views.values(), key=lambda v: v.order)
            ],
        }
    }
