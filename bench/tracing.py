"""Benchmark: what OpenTelemetry traces cost the run engine, off against on.

Runs ``bench/engine.py`` in turn with tracing off (no ``OTEL_*`` variable: no provider, the
operator's spans skipped) and with ``--tracing otlp`` (a span per item, its checkout and its agent
call, batched and exported over OTLP/HTTP to a stand-in collector on loopback), alternating the
two so that a change in the machine's load falls on both. Each run is a process of its own, as a
process sets its tracer provider once. The figure compared is each run's median engine CPU per
item over a plain client's on the same agents (``engine / direct``), which takes the machine's
speed at that moment out; the CPU per item is printed too. Pass the sampler variables to see
what sampling saves, e.g. ``OTEL_TRACES_SAMPLER=traceidratio OTEL_TRACES_SAMPLER_ARG=0.1``.
Writes ``bench/out/tracing.json``.

    .venv/bin/python bench/tracing.py [--items 2000] [--turns 3] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out" / "tracing.json"
RESULTS = {
    "off": ROOT / "bench" / "out" / "engine.json",
    "otlp": ROOT / "bench" / "out" / "engine-tracing.json",
}


def engine(mode: str, items: int, turns: int) -> dict[str, Any]:
    """One run of the engine benchmark, its results."""
    env = dict(os.environ)
    if mode == "off":
        env = {name: value for name, value in env.items() if not name.startswith("OTEL_")}
    command = [sys.executable, str(ROOT / "bench" / "engine.py")]
    command += ["--items", str(items), "--turns", str(turns), "--tracing", mode]
    subprocess.run(command, env=env, check=True, timeout=1200)
    results: dict[str, Any] = json.loads(RESULTS[mode].read_text())["results"]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {"off": [], "otlp": []}
    for _ in range(max(1, args.rounds)):
        for mode in runs:
            runs[mode].append(engine(mode, args.items, args.turns))
    summary = {
        mode: {
            "cpu_ratio": statistics.median(run["cpu_ratio"] for run in done),
            "engine_cpu_us": statistics.median(run["engine_cpu_us"] for run in done),
        }
        for mode, done in runs.items()
    }
    off, on = summary["off"], summary["otlp"]
    ratio = on["cpu_ratio"] / off["cpu_ratio"]
    print(
        f"tracing off: engine / direct {off['cpu_ratio']:.3f} "
        f"({off['engine_cpu_us']:.0f} us/item); "
        f"on: {on['cpu_ratio']:.3f} ({on['engine_cpu_us']:.0f} us/item); on / off {ratio:.2f}"
    )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"summary": summary, "on_over_off": ratio, "runs": runs}, indent=2))
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
