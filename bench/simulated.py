"""Scenario 7: one operator against many pools and agents, on a simulated cluster.

The cluster is :mod:`bench.simcluster`: pods turn Ready without a process and one in-process
agent serves every pod's address (echo after 10 ms), so one machine can hold thousands of agents.
Each size (pools x agents per pool) gets a fresh cluster and operator process and its own time
budget; a size that does not finish within it is recorded as unreached, with how far it got, and
the next size is tried. A size is measured in these steps:

- settle: pools created (``minSize = maxSize``), until every pool reports all its agents ready,
  with the CPU seconds the operator and the cluster (API server and kubelet, one process) spent
  on it, so the step says which of them the time went to;
- RSS: the operator's resident memory once settled (``VmRSS``); per pool and per agent come from
  a least-squares fit ``rss = base + a * pools + b * agents`` over the sizes reached; and the
  operator's CPU while nothing happens, in cores, read over ``IDLE_SECONDS`` from
  ``GRACE_SECONDS`` after the last pool turned Ready (its pools' passes, a steady pool's once in
  ``quiet_pass_seconds``);
- warm checkout p99: runs on up to ``SAMPLES`` pools spread over the namespace, at ``cap`` half
  the pool, so an idle agent always waits; from the operator's ``agentpool_checkout_seconds``
  histogram (``kind="warm"``), as the upper bound of the bucket the percentile falls in;
- spec change to plan applied: on the same pools, ``minSize`` and ``maxSize`` raised by one, one
  pool at a time, timed from the patch to the pool's status showing the new replica count;
- recovery: every agent of those pools held busy by a run of long items (``delaySeconds`` in the
  run's input), then the operator is SIGKILLed and started again; the time from the kill until
  its metrics count every busy agent busy again, and until every pool is served again; where
  that falls short, the states the new operator gave the held agents instead.

The API server is the local one (:mod:`agentpool.local.apiserver`), in the cluster process with
the simulated kubelet; each step records it as ``api_server``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from agentpool.local.kubeconfig import ApiAccess
from agentpool.settings import PoolSettings
from bench.harness import (
    ClusterProcess,
    Kube,
    OperatorProcess,
    finished,
    free_port,
    percentile,
    until,
)
from bench.reactivity import histogram_quantile

#: (pools, agents per pool) in the order they are tried, so 10, 100 and 1,000 pools and 100,
#: 1,000 and 10,000 agents each come up, the issue's corner (1,000 pools, 10,000 agents) before
#: 10,000 agents in 100 pools; --quick tries the first only.
SIZES = [(10, 10), (10, 100), (100, 10), (1000, 10), (100, 100)]
SAMPLES = 10
ECHO_SECONDS = 0.01
HOLD_SECONDS = 900
#: How long a restarted operator is given to know every busy agent again before the size
#: reports how many it knew instead.
RECOVERY_SECONDS = 120.0
CREATORS = 32
NAMESPACE = "sim"
IMAGE = "agentpool:0.1.0"
API_SERVER = "local"
#: Seconds from the last pool reporting all its agents Ready until the idle CPU is read: two
#: of a pool's idle passes, so every pool has looked at itself since its last agent turned Ready
#: (a steady pool then goes quiet, looked at once every ``quiet_pass_seconds``).
GRACE_SECONDS = 10.0
#: Seconds over which the settled operator's idle CPU is read: a whole quiet pass, so each steady
#: pool's look falls within it once (``--quick`` reads a shorter while).
IDLE_SECONDS = PoolSettings().quiet_pass_seconds


def spread(names: list[str], count: int) -> list[str]:
    """``count`` names evenly spread over ``names``, so samples are not all the first pools."""
    if len(names) <= count:
        return list(names)
    step = len(names) / count
    return [names[int(i * step)] for i in range(count)]


def fit(points: list[tuple[float, float, float]]) -> tuple[float, float, float] | None:
    """Least squares ``z = c + a * x + b * y`` through (x, y, z); None when the points do not
    tell ``a`` from ``b`` (fewer than three, or x and y in proportion)."""
    if len(points) < 3:
        return None
    rows = [(1.0, x, y) for x, y, _ in points]
    normal = [[sum(r[i] * r[j] for r in rows) for j in range(3)] for i in range(3)]
    right = [sum(r[i] * z for r, (_, _, z) in zip(rows, points, strict=True)) for i in range(3)]
    det = _det(normal)
    # The determinant of a positive semi-definite matrix is at most its diagonal's product.
    if abs(det) < 1e-9 * normal[0][0] * normal[1][1] * normal[2][2]:
        return None
    solved = []
    for column in range(3):
        swapped = [[right[i] if j == column else normal[i][j] for j in range(3)] for i in range(3)]
        solved.append(_det(swapped) / det)
    return solved[0], solved[1], solved[2]


def _det(m: list[list[float]]) -> float:
    return (
        m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
        - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
        + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
    )


async def metrics(session: aiohttp.ClientSession, port: int) -> str:
    try:
        async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
            return await response.text() if response.status == 200 else ""
    except aiohttp.ClientError:
        return ""


def process_cpu_seconds(pid: int) -> float:
    """User and system CPU seconds ``pid`` has used so far (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def agent_states(text: str, pools: set[str]) -> dict[str, int]:
    """The operator's agents of ``pools`` by state (busy, idle, starting...) in its metrics."""
    states: dict[str, int] = {}
    for line in text.splitlines():
        if not line.startswith("agentpool_agents{") or f'namespace="{NAMESPACE}"' not in line:
            continue
        labels, value = line.rsplit(" ", 1)
        if labels.split('pool="', 1)[1].split('"', 1)[0] in pools:
            state = labels.split('state="', 1)[1].split('"', 1)[0]
            states[state] = states.get(state, 0) + int(float(value))
    return states


def busy_agents(text: str) -> tuple[int, int]:
    """(busy agents, pools with gauges) in the operator's metrics text."""
    busy, pools = 0, set()
    for line in text.splitlines():
        if not line.startswith("agentpool_agents{") or f'namespace="{NAMESPACE}"' not in line:
            continue
        labels, value = line.rsplit(" ", 1)
        pools.add(labels.split('pool="', 1)[1].split('"', 1)[0])
        if 'state="busy"' in labels:
            busy += int(float(value))
    return busy, len(pools)


def warm_buckets(text: str) -> list[tuple[float, float]]:
    sums: dict[float, float] = {}
    for line in text.splitlines():
        if not line.startswith("agentpool_checkout_seconds_bucket{") or 'kind="warm"' not in line:
            continue
        labels, value = line.rsplit(" ", 1)
        le = labels.split('le="', 1)[1].split('"', 1)[0]
        key = math.inf if le == "+Inf" else float(le)
        sums[key] = sums.get(key, 0.0) + float(value)
    return sorted(sums.items())


class Size:
    """One size on a fresh simulated cluster and operator: created, settled, measured. With
    ``replicas`` above one, as many operator replicas share the pools (``--share``): CPU and
    memory are their sums, metrics are read from each, and the recovery SIGKILLs the one that
    works on the most pools held busy, for the others to take them (none is started again)."""

    def __init__(
        self,
        work: Path,
        pools: int,
        per_pool: int,
        budget: float,
        idle: float = IDLE_SECONDS,
        replicas: int = 1,
    ) -> None:
        self.idle_seconds = idle
        self.replicas = replicas
        suffix = f"-{replicas}r" if replicas > 1 else ""
        self.dir = work / f"simulated-{pools}x{per_pool}{suffix}"
        self.pools, self.per_pool = pools, per_pool
        self.deadline = time.monotonic() + budget
        self.names = [f"p{i:04d}" for i in range(pools)]
        self.ports = [free_port() for _ in range(replicas)]
        self.cluster = ClusterProcess(
            self.dir / "cluster",
            command=("-m", "bench.simcluster"),
            options=("--delay", str(ECHO_SECONDS)),
        )
        # Every replica running; one SIGKILLed leaves it.
        self.operators: list[OperatorProcess] = []
        self.session = aiohttp.ClientSession(trust_env=False)
        self.kube: Kube | None = None
        self.ready_agents = 0

    def unreached(self) -> dict[str, Any]:
        """How far a size that ran out of time got: its agents ready, the operator's memory."""
        running = all(o.process is not None and o.process.poll() is None for o in self.operators)
        rss = round(self.memory_kib() / 1024, 1) if self.operators and running else None
        return {
            "pools": self.pools,
            "agents": self.pools * self.per_pool,
            "ready_agents": self.ready_agents,
            "rss_mib": rss,
        }

    def left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{self.pools} pools x {self.per_pool} did not finish in time")
        return left

    def start_operator(self, index: int = 0) -> OperatorProcess:
        args: tuple[str, ...] = ()
        log = self.dir / "operator.log"
        if self.replicas > 1:
            # Each replica keeps its journals apart, as each pod has an emptyDir of its own.
            log = self.dir / f"operator-{index}.log"
            state = self.dir / f"operator-{index}-state"
            args = ("--share", "simulated", "--state-dir", str(state))
        operator = OperatorProcess(
            self.cluster.kubeconfig, log, metrics_port=self.ports[index], args=args
        )
        operator.start()
        self.operators.append(operator)
        return operator

    @property
    def operator(self) -> OperatorProcess | None:
        """The first replica (the operator, alone)."""
        return self.operators[0] if self.operators else None

    def cpu_seconds(self) -> float:
        return sum(operator.cpu_seconds() for operator in self.operators)

    def memory_kib(self) -> int:
        return sum(operator.memory_kib("VmRSS") for operator in self.operators)

    async def metrics(self) -> str:
        """Every live replica's metrics, one after the other (the parsers sum them)."""
        texts = [await metrics(self.session, o.metrics_port) for o in self.operators]
        return "\n".join(texts)

    async def close(self) -> None:
        if self.kube is not None:
            await self.kube.close()
        await self.session.close()
        for operator in self.operators:
            await asyncio.to_thread(operator.stop)
        await asyncio.to_thread(self.cluster.stop)

    async def measure(self) -> dict[str, Any]:
        await asyncio.to_thread(self.cluster.start)
        self.kube = kube = Kube(ApiAccess.from_kubeconfig(self.cluster.kubeconfig))
        for index in range(self.replicas):
            self.start_operator(index)
        for operator in self.operators:
            await operator.wait_ready(self.session)
        await kube.new_namespace(NAMESPACE)
        assert self.operator is not None
        assert self.cluster.process is not None
        cpu = (self.cpu_seconds(), process_cpu_seconds(self.cluster.process.pid))
        # Other work on the same cores slows both processes: each step says how loaded it was.
        load = " ".join(f"{value:.2f}" for value in os.getloadavg())
        began = time.monotonic()
        gate = asyncio.Semaphore(CREATORS)

        async def create(name: str) -> None:
            async with gate:
                # Every agent of a pool starts at once, as before maxUnready bounded it.
                size = {
                    "minSize": self.per_pool,
                    "maxSize": self.per_pool,
                    "maxUnready": self.per_pool,
                }
                await kube.create("agentpools", NAMESPACE, name, {"image": IMAGE, **size})

        await asyncio.gather(*(create(name) for name in self.names))
        await self.settled({name: self.per_pool for name in self.names})
        settle = time.monotonic() - began
        operator_cpu = self.cpu_seconds() - cpu[0]
        cluster_cpu = process_cpu_seconds(self.cluster.process.pid) - cpu[1]
        await asyncio.sleep(GRACE_SECONDS)
        idle_from, idle_began = self.cpu_seconds(), time.monotonic()
        rss = sorted([await self.rss_kib(), await self.rss_kib(), await self.rss_kib()])[1]
        idle = (self.cpu_seconds() - idle_from) / (time.monotonic() - idle_began)
        sampled = spread(self.names, SAMPLES)
        checkout = await self.warm_checkouts(sampled)
        plans = [await self.spec_change(name) for name in sampled]
        recovery, whole, known, states = await self.recovery(sampled)
        return {
            "pools": self.pools,
            "agents": self.pools * self.per_pool,
            "agents_per_pool": self.per_pool,
            "replicas": self.replicas,
            "api_server": API_SERVER,
            "load_average": load,
            "settle_seconds": round(settle, 1),
            "settle_operator_cpu_seconds": round(operator_cpu, 1),
            "settle_cluster_cpu_seconds": round(cluster_cpu, 1),
            "idle_operator_cpu_cores": round(idle, 3),
            "idle_window_seconds": self.idle_seconds,
            "rss_mib": round(rss / 1024, 1),
            "checkout_p99_ms": round(checkout * 1000, 2),
            "plan_p50_ms": round(percentile(plans, 50), 1),
            "plan_p99_ms": round(percentile(plans, 99), 1),
            "recovery_seconds": None if recovery is None else round(recovery, 2),
            "all_pools_back_seconds": None if whole is None else round(whole, 2),
            "busy_at_kill": len(sampled) * (self.per_pool + 1),
            "busy_known_again": known,
            "held_agent_states": states,
        }

    async def rss_kib(self) -> int:
        # A few passes of the idle pool loops between samples; three make the idle window.
        await asyncio.sleep(self.idle_seconds / 3)
        return self.memory_kib()

    async def settled(self, sizes: dict[str, int]) -> None:
        async def all_ready() -> bool:
            assert self.kube is not None
            ready = {
                p["metadata"]["name"]: (p.get("status") or {}).get("readyReplicas")
                for p in await self.kube.list("agentpools", NAMESPACE)
            }
            self.ready_agents = sum(int(ready.get(name) or 0) for name in sizes)
            return all(ready.get(name) == size for name, size in sizes.items())

        await until(all_ready, timeout=self.left(), what="every pool ready", interval=1.0)

    async def warm_checkouts(self, sampled: list[str]) -> float:
        assert self.kube is not None
        kube = self.kube
        items = max(40, 4 * self.per_pool)
        for name in sampled:
            spec = {
                "poolRef": {"name": name},
                "cap": max(1, self.per_pool // 2),
                "source": {"items": list(range(items))},
            }
            await kube.create("poolruns", NAMESPACE, f"warm-{name}", spec)

        async def done() -> bool:
            assert self.kube is not None
            runs = [await self.kube.get("poolruns", NAMESPACE, f"warm-{n}") for n in sampled]
            return all(finished(run) for run in runs)

        await until(done, timeout=self.left(), what="the warm runs", interval=0.5)
        return histogram_quantile(warm_buckets(await self.metrics()), 0.99)

    async def spec_change(self, name: str) -> float:
        """Raise the pool by one; ms until its status shows the new replica count."""
        assert self.kube is not None
        wanted = self.per_pool + 1
        started = time.monotonic()
        await self.kube.patch("agentpools", NAMESPACE, name, {"minSize": wanted, "maxSize": wanted})

        async def applied() -> bool:
            assert self.kube is not None
            pool = await self.kube.get("agentpools", NAMESPACE, name)
            return (pool.get("status") or {}).get("replicas") == wanted

        await until(applied, timeout=self.left(), what=f"pool {name} resized", interval=0.005)
        return (time.monotonic() - started) * 1000

    async def recovery(
        self, sampled: list[str]
    ) -> tuple[float | None, float | None, int, dict[str, int]]:
        """Hold every agent of ``sampled`` busy, SIGKILL the operator and start another (sharing,
        SIGKILL the replica with the most of them busy, for the others to take its pools); the
        seconds until every busy agent is counted busy again and until every pool is served
        (None when it did not happen within RECOVERY_SECONDS), how many busy agents the new
        operator counted busy by the end, and the states it gave the agents of ``sampled``."""
        assert self.kube is not None
        assert self.operator is not None
        held = self.per_pool + 1
        await self.settled(dict.fromkeys(sampled, held))
        for name in sampled:
            spec = {
                "poolRef": {"name": name},
                "cap": held,
                "input": {"delaySeconds": HOLD_SECONDS},
                "source": {"items": list(range(held))},
            }
            await self.kube.create("poolruns", NAMESPACE, f"hold-{name}", spec)
        expected = held * len(sampled)

        async def all_busy() -> bool:
            busy, _ = busy_agents(await self.metrics())
            return busy >= expected

        await until(all_busy, timeout=self.left(), what="every held agent busy", interval=0.2)
        victim = await self.busiest()
        os.kill(victim.pid, signal.SIGKILL)
        killed = time.monotonic()
        await asyncio.to_thread(victim.stop)  # reaps it
        self.operators.remove(victim)
        if self.replicas == 1:
            self.start_operator()
        known: float | None = None
        whole: float | None = None
        busy, text = 0, ""
        while known is None or whole is None:
            now = time.monotonic() - killed
            if now > RECOVERY_SECONDS:
                break
            text = await self.metrics()
            busy, pools = busy_agents(text)
            if busy >= expected and known is None:
                known = now
            if pools >= self.pools and whole is None:
                whole = now
            await asyncio.sleep(0.1)
        return known, whole, busy, agent_states(text, set(sampled))

    async def busiest(self) -> OperatorProcess:
        """The replica with the most busy agents (the only one, alone)."""
        counts = [busy_agents(await metrics(self.session, o.metrics_port)) for o in self.operators]
        return self.operators[max(range(len(counts)), key=lambda i: counts[i][0])]


async def run(
    work: Path, *, sizes: int, budget: float, idle: float = IDLE_SECONDS
) -> dict[str, Any]:
    """Scenario 7 over the first ``sizes`` sizes, each within ``budget`` seconds, the idle CPU
    read over ``idle`` seconds."""
    steps: list[dict[str, Any]] = []
    unreached: list[dict[str, Any]] = []
    missed: list[str] = []
    for pools, per_pool in SIZES[:sizes]:
        print(f"   {pools} pools x {per_pool} agents", flush=True)
        size = Size(work, pools, per_pool, budget, idle)
        try:
            steps.append(await size.measure())
            print(f"   {steps[-1]}", flush=True)
        except TimeoutError as error:
            missed.append(f"{pools} pools x {per_pool} agents: {error} (budget {budget:g} s)")
            unreached.append(size.unreached())
            print(f"   unreached: {unreached[-1]}", flush=True)
        finally:
            await size.close()
    stopped = "; ".join(missed) or "every size was reached"
    return {"simulated": summarise(steps, stopped=stopped, unreached=unreached, budget=budget)}


def summarise(
    steps: list[dict[str, Any]],
    *,
    stopped: str,
    unreached: list[dict[str, Any]],
    budget: float,
) -> dict[str, Any]:
    """The scenario's section of results.json from the sizes measured: the figures the issue
    names at the largest size reached, and the memory fit over all of them."""
    largest = max(steps, key=lambda s: (s["agents"], s["pools"]), default=None)
    slope = fit([(s["pools"], s["agents"], s["rss_mib"] * 1024) for s in steps])
    return {
        "max_agents": largest["agents"] if largest else None,
        "max_pools": max((s["pools"] for s in steps), default=None),
        "checkout_p99_ms": largest["checkout_p99_ms"] if largest else None,
        "recovery_seconds": largest["recovery_seconds"] if largest else None,
        "plan_p99_ms": largest["plan_p99_ms"] if largest else None,
        "rss_base_mib": round(slope[0] / 1024, 1) if slope else None,
        "rss_per_pool_kib": round(slope[1], 1) if slope else None,
        "rss_per_agent_kib": round(slope[2], 1) if slope else None,
        "api_server": API_SERVER,
        "echo_seconds": ECHO_SECONDS,
        "step_budget_seconds": budget,
        "recovery_limit_seconds": RECOVERY_SECONDS,
        "stopped": stopped,
        "unreached": unreached,
        "steps": steps,
    }


async def one_size(
    work: Path,
    pools: int,
    per_pool: int,
    budget: float,
    replicas: int = 1,
    idle: float = IDLE_SECONDS,
) -> dict[str, Any]:
    """One size's step, as :func:`run` measures each, on ``replicas`` sharing the pools."""
    size = Size(work, pools, per_pool, budget, idle, replicas)
    try:
        return await size.measure()
    finally:
        await size.close()


def main() -> None:
    """``python -m bench.simulated --size 1000x10``: one size alone, its step printed as JSON
    (``results.json`` is left as the last full run wrote it)."""
    parser = argparse.ArgumentParser(prog="python -m bench.simulated", description=main.__doc__)
    parser.add_argument("--size", default="1000x10", help="POOLSxAGENTS (default 1000x10)")
    parser.add_argument("--budget", type=float, default=900.0, help="seconds for the size")
    parser.add_argument(
        "--replicas", type=int, default=1, help="operator replicas sharing the pools (default 1)"
    )
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=IDLE_SECONDS,
        help=f"seconds the idle CPU is read over (default {IDLE_SECONDS:g}: a whole quiet period)",
    )
    args = parser.parse_args()
    pools, per_pool = (int(part) for part in args.size.split("x", 1))
    with tempfile.TemporaryDirectory(prefix="agentpool-simulated-") as work:
        step = asyncio.run(
            one_size(Path(work), pools, per_pool, args.budget, args.replicas, args.idle_seconds)
        )
    print(json.dumps(step, indent=2))


if __name__ == "__main__":
    main()
