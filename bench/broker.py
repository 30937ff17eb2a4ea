"""Benchmark: how many checkout/checkin cycles one pool's broker serves per second.

Builds a broker over ``--agents`` Ready agents, runs twice as many holders that each check an
agent out, yield once to the loop and check it back in, with random priorities so the waiter
queue is exercised, and reports cycles per second and the checkout latency (p50, p99, max) for
each pool size and strategy. Half the holders wait at any moment, so the latency is mostly time
queued behind others: it grows with the number of holders, not with the broker's own cost.
Writes the figures to ``bench/out/broker.json``.

    .venv/bin/python bench/broker.py [--agents 4 32 200] [--cycles 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

from agentpool.broker import Broker
from agentpool.pool import ObservedAgent, PoolPolicy

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out" / "broker.json"


async def measure(agents: int, cycles: int, strategy: str) -> dict[str, Any]:
    policy = PoolPolicy(min_size=agents, max_size=agents, strategy=strategy)  # type: ignore[arg-type]
    broker = Broker("bench", policy)
    now = time.time()
    broker.update_agents(
        ObservedAgent(f"agent-{i}", created_at=now, ready=True, ready_at=now, ip="127.0.0.1")
        for i in range(agents)
    )
    holders = 2 * agents
    per_holder = max(1, cycles // holders)
    latencies: list[float] = []
    rng = random.Random(1)

    async def holder(index: int) -> None:
        for _ in range(per_holder):
            started = time.perf_counter()
            checkout = await broker.checkout(
                timeout=30, priority=rng.randint(0, 3), holder=f"h{index}"
            )
            latencies.append(time.perf_counter() - started)
            await asyncio.sleep(0)
            broker.checkin(checkout)

    started = time.perf_counter()
    await asyncio.gather(*(holder(i) for i in range(holders)))
    elapsed = time.perf_counter() - started
    done = holders * per_holder
    latencies.sort()
    return {
        "agents": agents,
        "strategy": strategy,
        "cycles": done,
        "seconds": round(elapsed, 3),
        "cycles_per_second": round(done / elapsed),
        "checkout_p50_us": round(statistics.median(latencies) * 1e6, 1),
        "checkout_p99_us": round(latencies[int(len(latencies) * 0.99) - 1] * 1e6, 1),
        "checkout_max_us": round(latencies[-1] * 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[4, 32, 200])
    parser.add_argument("--cycles", type=int, default=20_000)
    args = parser.parse_args()
    results = []
    for agents in args.agents:
        for strategy in ("LIFO", "FIFO"):
            result = asyncio.run(measure(agents, min(args.cycles, 1_000_000), strategy))
            results.append(result)
            print(
                f"{agents:>4} agents {strategy}: {result['cycles_per_second']:>7} cycles/s, "
                f"checkout p50 {result['checkout_p50_us']} us, "
                f"p99 {result['checkout_p99_us']} us, max {result['checkout_max_us']} us"
            )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
