"""Scenario 10: fifty runs at once on one pool, with mixed priorities.

One pool of 4 agents (:mod:`bench.priority_agent`: an echo that sleeps ``WORK_SECONDS`` an
item) serves two rounds of 50 PoolRuns created one after another, priorities 2, 1, 0 in turn,
each with ``ITEMS`` items at ``cap: 2``, so 100 checkouts want 4 agents:

- queued: the agents' start-up waits on a gate file, which the bench opens only once the pool's
  status counts every run's checkouts as waiting, so who is served first is the broker's choice
  alone;
- warm: the same again on the pool now Ready, as a user creating runs one after another meets
  it (a run created first may take agents before a later one of higher priority exists).

The agents note each item's start and end (wall clock). For each run, its first ``cap`` slots
fall free when it is created (or when the round's first item starts, if later) and one more
whenever one of its items ends; matching the run's free slots in order with its item starts
gives each wait, and the longest is the run's. The checks, each with a tolerance for the time
between an agent finishing and the operator handing out its next item (``TOLERANCE_SECONDS``):

- an inversion: an item started while a slot of a run of higher priority had been waiting for
  longer than the tolerance, and stayed waiting past it;
- a FIFO break: among runs of one priority, an item started while a slot that fell free clearly
  earlier (or, of the runs' first slots, one of a run created earlier) stayed waiting past the
  tolerance;
- starvation: a run that did not finish, or whose longest wait was longer than its round.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import ROOT, Kube, Stage, Watcher, finished, pool_spec, until

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
    created: float
    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)

    def slots(self, opened: float) -> list[tuple[float, float, bool]]:
        """(fell free, served, first) for each item, matched in order; the first ``cap`` slots
        fall free when the run is created, or when the gate opens if that is later."""
        frees = sorted([max(opened, self.created)] * CAP + self.ends)
        return [
            (free, start, index < CAP)
            for index, (free, start) in enumerate(zip(frees, sorted(self.starts), strict=False))
        ]

    def longest_wait(self, opened: float) -> float:
        return max((start - free for free, start, _ in self.slots(opened)), default=0.0)


def priority_of(order: int) -> int:
    return LEVELS[order % len(LEVELS)]


def read_views(path: Path, names: list[str], created: list[float]) -> dict[str, RunView]:
    views = {name: RunView(name, n, priority_of(n), created[n]) for n, name in enumerate(names)}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 5 and parts[1] in views:
            views[parts[1]].starts.append(int(parts[3]) / 1e9)
            views[parts[1]].ends.append(int(parts[4]) / 1e9)
    return views


def ahead(x: RunView, fx: float, gx: bool, y: RunView, fy: float, gy: bool) -> bool:
    """Whether slot X of equal priority should be served before slot Y: it fell free clearly
    earlier, or both are their runs' first and X's run was created first."""
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
    lines = [
        f"{'run':<10}{'priority':>9}{'items':>7}{'created':>9}{'first start':>13}{'finish':>9}"
        f"{'wait':>8}"
    ]
    for view in sorted(views.values(), key=lambda v: (-v.priority, v.order)):
        first = min(view.starts, default=float("nan")) - opened
        last = max(view.ends, default=float("nan")) - opened
        lines.append(
            f"{view.name:<10}{view.priority:>9}{len(view.starts):>7}"
            f"{view.created - opened:>9.3f}{first:>13.3f}{last:>9.3f}"
            f"{view.longest_wait(opened):>8.3f}"
        )
    return "\n".join(lines)


async def create_runs(kube: Kube, prefix: str, count: int) -> tuple[list[str], list[float]]:
    """Create ``count`` runs one after another, priorities in turn; their names and the wall
    clock time each was created at."""
    names, created = [f"{prefix}-{n:02d}" for n in range(count)], []
    for n, name in enumerate(names):
        items = [{"id": f"{name}-{i}"} for i in range(ITEMS)]
        spec = {"poolRef": {"name": POOL}, "priority": priority_of(n), "cap": CAP}
        spec |= {"itemId": "id", "checkoutTimeoutSeconds": 600, "source": {"items": items}}
        await kube.create("poolruns", NAMESPACE, name, spec)
        created.append(time.time())
    return names, created


async def wait_all(watched: Watcher, names: list[str]) -> dict[str, str | None]:
    """Until every run has finished, within a bound; each one's phase."""
    deadline = time.monotonic() + 120 + len(names) * ITEMS * WORK_SECONDS * 4
    while not all(finished(watched.objects.get(name, {})) for name in names):
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    return {
        name: (watched.objects.get(name, {}).get("status") or {}).get("phase") for name in names
    }


def figures(
    timings: Path, names: list[str], created: list[float], phases: dict[str, str | None]
) -> dict[str, Any]:
    """A round's figures from the agents' timings, its table printed."""
    views = read_views(timings, names, created)
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
                "created": round(view.created - opened, 3),
                "first_start": round(min(view.starts) - opened, 3) if view.starts else None,
                "finish": round(max(view.ends) - opened, 3) if view.ends else None,
                "longest_wait": round(waits[view.name], 3),
            }
            for view in sorted(views.values(), key=lambda v: v.order)
        ],
    }


async def run(work: Path, *, runs: int = RUNS) -> dict[str, Any]:
    """Scenario 10; the figures for results.json: those of the queued round, with the warm
    round's beside them."""
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
        expected = runs * min(CAP, ITEMS)

        async def waiting() -> int:
            pool = await kube.get("agentpools", NAMESPACE, POOL)
            return int((pool.get("status") or {}).get("waiting") or 0)

        async def all_queued() -> bool:
            return await waiting() >= expected

        queued_names, queued_created = await create_runs(kube, "queued", runs)
        with contextlib.suppress(TimeoutError):
            await until(all_queued, timeout=120, what="every checkout queued", interval=0.2)
        queued = await waiting()
        gate.touch()
        queued_phases = await wait_all(watched, queued_names)
        warm_names, warm_created = await create_runs(kube, "warm", runs)
        warm_phases = await wait_all(watched, warm_names)
        await watched.stop()
    print("queued: every checkout waiting before the agents turned Ready", flush=True)
    queued_figures = figures(timings, queued_names, queued_created, queued_phases)
    print("warm: the runs created on a Ready pool", flush=True)
    warm_figures = figures(timings, warm_names, warm_created, warm_phases)
    return {
        "priorities": {
            "runs": runs,
            "agents": AGENTS,
            "items_per_run": ITEMS,
            "cap": CAP,
            "levels": list(LEVELS),
            "work_seconds": WORK_SECONDS,
            "tolerance_seconds": TOLERANCE_SECONDS,
            "queued_before_gate": queued,
            "expected_queued": expected,
            **queued_figures,
            "warm": warm_figures,
        }
    }
