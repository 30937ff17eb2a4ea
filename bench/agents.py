"""Benchmark: what one item costs on the agent protocol, client and SDK together.

Starts the echo example agent (an ``async`` handler that returns its item, so every microsecond
measured is protocol overhead) and, for contrast, the flaky example (a synchronous handler, so
each item also crosses into the agent's worker thread), then calls each through
``agentpool.io.agents.AgentClient.invoke`` one item after another, as a run with cap 1 does. It
prints throughput and p50/p95/p99 latency and writes them to ``bench/out/agents.json``.

    .venv/bin/python bench/agents.py [--count 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agentpool.io.agents import AgentClient

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out" / "agents.json"
AGENTS = {
    "echo (async handler)": ROOT / "examples" / "agents" / "echo.py",
    "flaky (sync handler)": ROOT / "examples" / "agents" / "flaky.py",
}
WARMUP = 200
MAX_COUNT = 200_000


def start(path: Path, logs: Path, token: str) -> tuple[subprocess.Popen[bytes], str]:
    """Start the agent at ``path`` on a free loopback port; its process and endpoint."""
    env = dict(os.environ, AGENTPOOL_TOKEN=token, AGENT_HOST="127.0.0.1", AGENT_PORT="0")
    with logs.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "agentpool.agent", f"{path}:agent"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and process.poll() is None:
        match = re.search(r"listening on (http://\S+), ", logs.read_text())
        if match:
            return process, match.group(1)
        time.sleep(0.01)
    process.kill()
    raise SystemExit(f"{path.name} did not start:\n{logs.read_text()}")


async def measure(client: AgentClient, endpoint: str, token: str, count: int) -> dict[str, Any]:
    """Invoke ``count`` items one after another; latency percentiles in ms and items a second."""
    deadline = time.monotonic() + 30
    while not await client.ready(endpoint):
        if time.monotonic() > deadline:
            raise SystemExit(f"{endpoint} never became ready")
        await asyncio.sleep(0.01)
    item = {"text": "x" * 200, "n": 1}
    for index in range(WARMUP):
        envelope = {"id": f"w{index}", "item": item, "input": None, "attempt": 1, "run": "bench"}
        await client.invoke(endpoint, token, envelope, timeout=10)
    latencies: list[float] = []
    failures = 0
    started = time.perf_counter()
    for index in range(count):
        envelope = {"id": index, "item": item, "input": None, "attempt": 1, "run": "bench"}
        before = time.perf_counter()
        result = await client.invoke(endpoint, token, envelope, timeout=10)
        latencies.append((time.perf_counter() - before) * 1000.0)
        failures += not result.ok
    elapsed = time.perf_counter() - started
    cuts = statistics.quantiles(latencies, n=100)
    return {
        "count": count,
        "failures": failures,
        "itemsPerSecond": round(count / elapsed, 1),
        "p50Ms": round(cuts[49], 3),
        "p95Ms": round(cuts[94], 3),
        "p99Ms": round(cuts[98], 3),
        "maxMs": round(max(latencies), 3),
    }


async def measure_one(endpoint: str, token: str, count: int) -> dict[str, Any]:
    async with AgentClient() as client:
        return await measure(client, endpoint, token, count)


def main(count: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="agentpool-bench-") as tmp:
        for name, path in AGENTS.items():
            token = secrets.token_hex(16)
            process, endpoint = start(path, Path(tmp) / f"{path.stem}.log", token)
            try:
                results[name] = asyncio.run(measure_one(endpoint, token, count))
            finally:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=30)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=5000, help="items per agent (bounded)")
    args = parser.parse_args()
    count = max(1, min(args.count, MAX_COUNT))
    results = main(count)
    print(f"agent protocol, one item at a time over loopback: {count} items per agent")
    header = ("items/s", "p50 ms", "p95 ms", "p99 ms", "max ms", "failed")
    print(f"{'agent':<24}" + "".join(f"{column:>9}" for column in header))
    for name, figures in results.items():
        print(
            f"{name:<24}{figures['itemsPerSecond']:>9}{figures['p50Ms']:>9}{figures['p95Ms']:>9}"
            f"{figures['p99Ms']:>9}{figures['maxMs']:>9}{figures['failures']:>8}"
        )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"benchmark": "agents", "results": results}, indent=2) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")
