"""Benchmark: the run engine's CPU per item, against a plain client calling the same agents.

Starts 8 echo agents (``examples/agents/echo.py``) on loopback, then in this one process takes
turns: a plain aiohttp client calls them directly, 8 at a time, and a run of the same items at
cap 8 goes through the operator's own parts (``RunEngine`` with its journal, the pool's
``Broker``, ``BrokerDispatcher`` and the agent client), with no API server and no kopf. Both
sides' CPU is this process's, so the ratio of the two is what the engine and its dispatch cost
per item beyond any caller's HTTP exchange, without the noise of the rest of the operator or of
scheduling on a shared machine. Prints each turn and the medians; writes
``bench/out/engine.json``.

With ``--tracing otlp`` the engine runs with OpenTelemetry traces on, as ``agentpool run`` does
with ``OTEL_EXPORTER_OTLP_ENDPOINT`` set: a span per item, its checkout and its agent call,
batched and exported over OTLP/HTTP to a stand-in collector on loopback (``bench/otlpsink.py``,
a process of its own); it writes ``bench/out/engine-tracing.json``. ``bench/tracing.py`` runs
both and prints the ratio.

    .venv/bin/python bench/engine.py [--items 4000] [--turns 5] [--tracing off|otlp]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import aiohttp

from agentpool import tracing
from agentpool.api import PoolRunSpec
from agentpool.broker import Broker
from agentpool.handlers.dispatch import BrokerDispatcher
from agentpool.handlers.runtime import PoolHandle, Runtime
from agentpool.io.agents import AgentClient
from agentpool.io.journal import Journals
from agentpool.io.kube import Kube
from agentpool.pool import ObservedAgent, PoolPolicy
from agentpool.runs.config import config_from_spec
from agentpool.runs.engine import RunEngine
from agentpool.runs.sources import inline_source

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out" / "engine.json"
OUT_TRACING = ROOT / "bench" / "out" / "engine-tracing.json"
SINK = ROOT / "bench" / "otlpsink.py"
AGENT = ROOT / "examples" / "agents" / "echo.py"
AGENTS = 8
PAYLOAD = "x" * 200
MAX_ITEMS = 100_000


class NullSink:
    """Status goes nowhere: a write costs a short wait, as a request to the API server would."""

    async def write(self, patch: dict[str, Any]) -> None:
        await asyncio.sleep(0.002)

    async def write_results_configmap(self, name: str, data: dict[str, str]) -> None:
        await asyncio.sleep(0.002)

    async def event(self, type: str, reason: str, message: str) -> None:
        return None


def start_agents(token: str, logs: Path, port: int) -> list[subprocess.Popen[bytes]]:
    """The agents listen on one port at 127.0.0.2 and up, as a pool's pods share their port."""
    processes = []
    for index in range(AGENTS):
        env = dict(os.environ, AGENTPOOL_TOKEN=token, AGENT_PORT=str(port))
        env["AGENT_HOST"] = f"127.0.0.{index + 2}"
        log = logs / f"agent-{index}.log"
        with log.open("wb") as out:
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "agentpool.agent", f"{AGENT}:agent"],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            )
    deadline = time.monotonic() + 60
    for index, process in enumerate(processes):
        log = logs / f"agent-{index}.log"
        while not re.search(r"listening on http://", log.read_text()):
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"agent {index} did not start:\n{log.read_text()}")
            time.sleep(0.01)
    return processes


def start_sink(port: int, counts: Path) -> subprocess.Popen[bytes]:
    """The stand-in collector, listening before this returns."""
    sink = subprocess.Popen(
        [sys.executable, str(SINK), str(port), str(counts)], stdout=subprocess.PIPE
    )
    assert sink.stdout is not None
    if sink.stdout.readline().strip() != b"listening":
        raise SystemExit("the OTLP sink did not start")
    return sink


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def items(count: int) -> list[dict[str, Any]]:
    return [{"id": f"i{index}", "text": PAYLOAD} for index in range(count)]


async def direct(endpoints: list[str], token: str, count: int) -> tuple[float, float]:
    """CPU microseconds per item and items per second of a plain aiohttp client."""
    headers = {"Authorization": f"Bearer {token}"}
    work = items(count)

    async def loop(session: aiohttp.ClientSession, endpoint: str, start: int) -> None:
        for item in work[start :: len(endpoints)]:
            envelope = {"id": item["id"], "item": item, "input": None, "attempt": 1, "run": "d"}
            async with session.post(f"{endpoint}/invoke", json=envelope, headers=headers) as answer:
                await answer.read()

    async with aiohttp.ClientSession() as session:
        cpu, started = cpu_seconds(), time.perf_counter()
        await asyncio.gather(*(loop(session, e, i) for i, e in enumerate(endpoints)))
        return (cpu_seconds() - cpu) / count * 1e6, count / (time.perf_counter() - started)


async def engine(
    runtime: Runtime, journals: Journals, name: str, count: int
) -> tuple[float, float]:
    """CPU microseconds per item and items per second of a run at cap 8."""
    work = items(count)
    spec = {"poolRef": {"name": "bench"}, "source": {"items": work}, "cap": AGENTS, "itemId": "id"}
    dispatcher = BrokerDispatcher(runtime, "bench")
    journal = journals.open(name)
    run = RunEngine(
        config_from_spec(name, PoolRunSpec.model_validate(spec), pools={}),
        source=inline_source(work),
        dispatcher=dispatcher,
        sink=NullSink(),
        journal=journal,
    )
    cpu, started = cpu_seconds(), time.perf_counter()
    outcome = await run.run()
    elapsed, cpu = time.perf_counter() - started, cpu_seconds() - cpu
    if journal is not None:
        journal.close()
    if outcome.result != "Drained" or run.ledger.succeeded != count:
        raise SystemExit(f"the run ended {outcome.result}: {outcome.message}")
    return cpu / count * 1e6, count / elapsed


async def measure(count: int, turns: int, token: str, port: int, state: Path) -> dict[str, Any]:
    endpoints = [f"http://127.0.0.{index + 2}:{port}" for index in range(AGENTS)]
    broker = Broker("bench", PoolPolicy(min_size=AGENTS, max_size=AGENTS, port=port))
    broker.update_agents(
        ObservedAgent(f"agent-{i}", created_at=0.0, ready=True, ready_at=1.0, ip=f"127.0.0.{i + 2}")
        for i in range(AGENTS)
    )
    async with AgentClient() as agents:
        # The API client is asked only about pools the runtime does not serve: none here.
        runtime = Runtime(kube=cast(Kube, None), agents=agents)
        runtime.pools[("bench", "bench")] = PoolHandle(
            namespace="bench",
            name="bench",
            broker=broker,
            port=port,
            wake=asyncio.Event(),
            token=token,
        )
        journals = Journals(state)
        # Warm both up: connections, imports, the allocator.
        await direct(endpoints, token, 400)
        await engine(runtime, journals, "warmup", 400)
        rows = []
        for turn in range(turns):
            direct_cpu, direct_rate = await direct(endpoints, token, count)
            engine_cpu, engine_rate = await engine(runtime, journals, f"turn-{turn}", count)
            rows.append(
                {
                    "direct_cpu_us": round(direct_cpu, 1),
                    "engine_cpu_us": round(engine_cpu, 1),
                    "cpu_ratio": round(engine_cpu / direct_cpu, 3),
                    "direct_items_per_second": round(direct_rate),
                    "engine_items_per_second": round(engine_rate),
                }
            )
            print(
                f"turn {turn + 1}: direct {direct_cpu:.0f} us/item ({direct_rate:.0f}/s), "
                f"engine {engine_cpu:.0f} us/item ({engine_rate:.0f}/s), "
                f"ratio {engine_cpu / direct_cpu:.2f}",
                flush=True,
            )
    return {
        "items": count,
        "turns": rows,
        "direct_cpu_us": statistics.median(row["direct_cpu_us"] for row in rows),
        "engine_cpu_us": statistics.median(row["engine_cpu_us"] for row in rows),
        "cpu_ratio": statistics.median(row["cpu_ratio"] for row in rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=4000, help="items per turn (bounded)")
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--tracing", choices=("off", "otlp"), default="off")
    args = parser.parse_args()
    count = max(100, min(args.items, MAX_ITEMS))
    token = secrets.token_hex(16)
    port = free_port()
    traced = args.tracing == "otlp"
    with tempfile.TemporaryDirectory(prefix="agentpool-bench-") as tmp:
        sink, counts, provider = None, Path(tmp) / "sink.json", None
        if traced:
            sink_port = free_port()
            sink = start_sink(sink_port, counts)
            environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink_port}"}
            os.environ.update(environ)
            provider = tracing.install(environ)
        processes = start_agents(token, Path(tmp), port)
        try:
            results = asyncio.run(measure(count, max(1, args.turns), token, port, Path(tmp)))
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait(timeout=30)
            tracing.shutdown(provider)
            if sink is not None:
                sink.terminate()
                sink.wait(timeout=30)
        if traced:
            results["tracing"] = json.loads(counts.read_text())
    results["tracing_mode"] = args.tracing
    print(
        f"median of {len(results['turns'])} turns of {count} items (tracing {args.tracing}): "
        f"direct {results['direct_cpu_us']} us/item, engine {results['engine_cpu_us']} us/item, "
        f"engine / direct {results['cpu_ratio']}"
    )
    if traced:
        print(
            f"the collector got {results['tracing']['requests']} exports, "
            f"{results['tracing']['bytes']} bytes"
        )
    out = OUT_TRACING if traced else OUT
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"benchmark": "engine", "results": results}, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
