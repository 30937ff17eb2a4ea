"""Scenario 12: calls and casts through the gateway, beside direct calls to the same agents.

A pool of 8 echo agents of 4 slots each, all Ready. One at a time (latency), in blocks taken in
turn so the machine's moods fall on every kind alike: a direct ``POST /invoke`` to a warm agent
with the pool's token on a kept connection, from the client library's own agent caller (the
floor any call through a pool stands on); ``client.call`` and ``client.cast`` through the
gateway; and a lease's whole life (``client.lease``, one invoke, release), which was the client's
``call`` before the gateway. Then 32 at a time for a fixed time each, direct and through the
gateway in turn (throughput). Around each kind the API server's request counts, less the
scenario's own, give the requests per call, and ``/proc`` the CPU per call of the operator, of
this process (the client) and of the whole machine: on a machine whose cores the client, the
operator and the agents share, the throughput of each kind is the machine's CPU over its CPU
per call.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agentpool.client import Client
from agentpool.client.agents import AgentCaller
from agentpool.wire.envelopes import envelope_body
from bench.harness import ROOT, Kube, Stage, percentile, pool_spec, wait_pool_ready

AGENT = ROOT / "bench" / "echo_agent.py"
AGENTS, SLOTS, CONCURRENCY = 8, 4, 32
#: Calls of each kind one at a time are taken in this many blocks, in turn.
BLOCKS = 5


def _ms(values: list[float], q: float) -> float:
    return round(percentile(values, q), 3)


def _machine_cpu_seconds() -> float:
    """CPU time the whole machine has spent busy so far (user, nice, system: ``/proc/stat``)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:4]
    return sum(int(value) for value in fields) / os.sysconf("SC_CLK_TCK")


def _own_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


class Counted:
    """The operator's API requests and CPU over the phases of one kind of call, and the CPU of
    this process (the client) and of the whole machine beside it."""

    def __init__(self, stage: Stage) -> None:
        self._stage = stage
        self.requests = 0
        self.cpu_seconds = 0.0
        self.client_cpu_seconds = 0.0
        self.machine_cpu_seconds = 0.0
        self.calls = 0
        self.seconds = 0.0
        #: What the API server served over the phases, by (verb, resource), the scenario's own
        #: requests included (they are counted by verb only, in ``requests``).
        self.served: Counter[tuple[str, str]] = Counter()

    async def measure(self, calls: int, work: Awaitable[Any]) -> Any:
        kube: Kube = self._stage.kube
        assert self._stage.operator is not None
        before, own = await kube.counts(), Counter(kube.own)
        cpu, started = self._stage.operator.cpu_seconds(), time.monotonic()
        client, machine = _own_cpu_seconds(), _machine_cpu_seconds()
        result = await work
        self.seconds += time.monotonic() - started
        self.cpu_seconds += self._stage.operator.cpu_seconds() - cpu
        self.client_cpu_seconds += _own_cpu_seconds() - client
        self.machine_cpu_seconds += _machine_cpu_seconds() - machine
        after, own_after = await kube.counts(), Counter(kube.own)
        self.served.update(after - before)
        served = sum(after.values()) - sum(before.values())
        self.requests += served - (sum(own_after.values()) - sum(own.values()))
        self.calls += calls
        return result

    def per_call(self) -> float:
        return round(self.requests / max(1, self.calls), 4)

    def cpu_ms_per_call(self, seconds: float | None = None) -> float:
        spent = self.cpu_seconds if seconds is None else seconds
        return round(spent * 1000 / max(1, self.calls), 3)


async def _timed(count: int, one: Callable[[int], Awaitable[Any]]) -> list[float]:
    latencies = []
    for n in range(count):
        started = time.perf_counter()
        await one(n)
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


async def _throughput(seconds: float, one: Callable[[int, int], Awaitable[Any]]) -> int:
    """Calls done by :data:`CONCURRENCY` workers, each calling in a loop, for ``seconds``."""
    deadline = time.monotonic() + seconds
    done = 0

    async def worker(index: int) -> None:
        nonlocal done
        n = 0
        while time.monotonic() < deadline:
            await one(index, n)
            n += 1
            done += 1

    await asyncio.gather(*(worker(index) for index in range(CONCURRENCY)))
    return done


async def run(work: Path, *, calls: int, seconds: float) -> dict[str, Any]:
    """Scenario 12; the figures for results.json and the samples for the plots."""
    async with Stage(work, "gateway") as stage:
        kube = stage.kube
        namespace = await kube.new_namespace("bench")
        spec = pool_spec(AGENT, minSize=AGENTS, maxSize=AGENTS, slots=SLOTS)
        await kube.create("agentpools", namespace, "echo", spec)
        endpoints = await wait_pool_ready(kube, namespace, "echo", AGENTS, timeout=90)
        token = await kube.token(namespace, "echo")
        caller = AgentCaller()

        async def direct(index: int, n: int = 0) -> Any:
            envelope = envelope_body(id=n, item={"n": n}, input=None, attempt=1, run=None)
            endpoint = endpoints[index % len(endpoints)]
            return await caller.invoke(endpoint, token, envelope, timeout=30)

        try:
            async with Client.from_kubeconfig(
                stage.cluster.kubeconfig, namespace=namespace
            ) as client:
                return await _measure(stage, client, direct, calls=calls, seconds=seconds)
        finally:
            caller.close()


async def _measure(
    stage: Stage,
    client: Client,
    direct: Callable[..., Awaitable[Any]],
    *,
    calls: int,
    seconds: float,
) -> dict[str, Any]:
    async def call(n: int) -> Any:
        return await client.call("echo", {"n": n})

    async def cast(n: int) -> Any:
        return await client.cast("echo", {"n": n})

    async def leased(n: int) -> Any:
        async with client.lease("echo", ttl=60) as agent:
            return await agent.invoke({"n": n})

    # Connections opened, the caller's token reviewed, code paths warm.
    await _timed(50, call)
    await _timed(50, lambda n: direct(n, n))
    counted = {kind: Counted(stage) for kind in ("direct", "call", "cast", "lease")}
    samples: dict[str, list[float]] = {kind: [] for kind in counted}
    block = max(1, calls // BLOCKS)
    for _ in range(BLOCKS):
        for kind, one in (("direct", lambda n: direct(n, n)), ("call", call), ("cast", cast)):
            samples[kind] += await counted[kind].measure(block, _timed(block, one))
    leases = max(1, calls // 40)
    samples["lease"] = await counted["lease"].measure(leases, _timed(leases, leased))

    rates: dict[str, list[float]] = {"direct": [], "call": []}
    busy = {kind: Counted(stage) for kind in rates}
    for _ in range(2):
        for kind, one in (("direct", direct), ("call", lambda _i, n: call(n))):
            done = await busy[kind].measure(0, _throughput(seconds, one))
            busy[kind].calls += done
            rates[kind].append(done / seconds)
    direct_rate, call_rate = statistics.median(rates["direct"]), statistics.median(rates["call"])
    figures = {
        "agents": AGENTS,
        "slots": SLOTS,
        "concurrency": CONCURRENCY,
        "calls": block * BLOCKS,
        "direct_p50_ms": _ms(samples["direct"], 50),
        "direct_p99_ms": _ms(samples["direct"], 99),
        "call_p50_ms": _ms(samples["call"], 50),
        "call_p99_ms": _ms(samples["call"], 99),
        "overhead_p50_ms": round(_ms(samples["call"], 50) - _ms(samples["direct"], 50), 3),
        "overhead_p99_ms": round(_ms(samples["call"], 99) - _ms(samples["direct"], 99), 3),
        "cast_p50_ms": _ms(samples["cast"], 50),
        "cast_p99_ms": _ms(samples["cast"], 99),
        "lease_call_p50_ms": _ms(samples["lease"], 50),
        "lease_call_p99_ms": _ms(samples["lease"], 99),
        "direct_calls_per_second": round(direct_rate, 1),
        "calls_per_second": round(call_rate, 1),
        "throughput_ratio": round(call_rate / direct_rate, 3),
        "api_requests_per_call": counted["call"].per_call(),
        "api_requests_per_cast": counted["cast"].per_call(),
        "api_requests_per_lease_call": counted["lease"].per_call(),
        "api_requests_per_call_at_32": busy["call"].per_call(),
        "operator_cpu_ms_per_call": counted["call"].cpu_ms_per_call(),
        "operator_cpu_ms_per_call_at_32": busy["call"].cpu_ms_per_call(),
        "operator_cpu_ms_per_direct_call_at_32": busy["direct"].cpu_ms_per_call(),
        "client_cpu_ms_per_call_at_32": busy["call"].cpu_ms_per_call(
            busy["call"].client_cpu_seconds
        ),
        "client_cpu_ms_per_direct_call_at_32": busy["direct"].cpu_ms_per_call(
            busy["direct"].client_cpu_seconds
        ),
        "machine_cpu_ms_per_call_at_32": busy["call"].cpu_ms_per_call(
            busy["call"].machine_cpu_seconds
        ),
        "machine_cpu_ms_per_direct_call_at_32": busy["direct"].cpu_ms_per_call(
            busy["direct"].machine_cpu_seconds
        ),
        "throughput_seconds": seconds,
    }
    return {"gateway": figures, "_samples": {"gateway_" + k: v for k, v in samples.items()}}
