"""The PNG plots of ``python -m bench``, drawn with matplotlib when it is installed.

matplotlib is in the ``dev`` extra, not a dependency of the operator: it is imported here, lazily,
and without it the bench says so and skips the plots. Each plot is drawn only from the samples of
a scenario that ran.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def draw(results: dict[str, Any], samples: dict[str, Any], out: Path) -> list[Path]:
    """Draw what the samples allow into ``out``; the files written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[dev]'): no plots drawn")
        return []
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, painter in PAINTERS.items():
        figure = painter(plt, results, samples)
        if figure is None:
            continue
        path = out / f"{name}.png"
        figure.tight_layout()
        figure.savefig(path, dpi=100)
        plt.close(figure)
        written.append(path)
    return written


def _cdf(values: list[float]) -> tuple[list[float], list[float]]:
    ordered = sorted(values)
    return ordered, [(i + 1) / len(ordered) for i in range(len(ordered))]


def overhead(plt: Any, results: dict[str, Any], samples: dict[str, Any]) -> Any:
    pool, direct = samples.get("overhead_pool_gaps_ms"), samples.get("overhead_direct_gaps_ms")
    if not pool or not direct:
        return None
    figure, axes = plt.subplots(figsize=(7, 4))
    for values, label in (
        (direct, "direct asyncio client"),
        (pool, "PoolRun through the operator"),
    ):
        xs, ys = _cdf([max(v, 0.01) for v in values])
        axes.plot(xs, ys, label=label)
    axes.set_xscale("log")
    axes.set_xlabel("idle gap on an agent between two items (ms, log scale)")
    axes.set_ylabel("fraction of items")
    figures = results.get("overhead") or {}
    axes.set_title(
        f"Per-item overhead, {figures.get('items')} items, 8 echo agents, cap 8\n"
        f"throughput ratio {figures.get('throughput_ratio')}"
    )
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    return figure


def warm_vs_cold(plt: Any, results: dict[str, Any], samples: dict[str, Any]) -> Any:
    figures = results.get("warm_vs_cold") or {}
    if figures.get("warm_s") is None:
        return None
    figure, axes = plt.subplots(figsize=(7, 4))
    labels = ["warm pool", "a pod per item (maxUses 1)"]
    measured = [figures["warm_s"], figures["cold_s"]]
    theory = [figures["theoretical_warm_s"], figures["theoretical_cold_s"]]
    positions = range(len(labels))
    axes.bar([p - 0.2 for p in positions], measured, width=0.4, label="measured")
    axes.bar([p + 0.2 for p in positions], theory, width=0.4, label="agents' own time (theory)")
    axes.set_xticks(list(positions), labels)
    axes.set_ylabel("makespan (s)")
    axes.set_title(
        f"{figures['items']} items, {figures['startup_s']} s start-up, "
        f"{figures['work_s'] * 1000:.0f} ms work: ratio {figures['ratio']} "
        f"(theory {figures['theoretical_ratio']})"
    )
    axes.legend()
    return figure


def scale(plt: Any, results: dict[str, Any], samples: dict[str, Any]) -> Any:
    progress, memory = samples.get("scale_progress"), samples.get("scale_rss_mib")
    if not progress:
        return None
    figure, axes = plt.subplots(figsize=(7, 4))
    axes.plot([p[0] for p in progress], [p[1] for p in progress], color="tab:blue")
    axes.set_xlabel("seconds since the run was created")
    axes.set_ylabel("items succeeded (as status reports)", color="tab:blue")
    if memory:
        right = axes.twinx()
        right.plot([m[0] for m in memory], [m[1] for m in memory], color="tab:red")
        right.set_ylabel("operator resident memory (MiB)", color="tab:red")
        right.set_ylim(bottom=0)
    figures = results.get("scale") or {}
    axes.set_title(
        f"{figures.get('items')} items via the HTTP source, cap 64, pool 8 to 32: "
        f"{figures.get('items_per_second')} items/s"
    )
    return figure


def latency(plt: Any, results: dict[str, Any], samples: dict[str, Any]) -> Any:
    wanted = {
        "overflow pod\ncreated": "overflow_ms",
        "replacement pod\ncreated": "replacement_ms",
        "lease\nBound": "lease_ms",
        "lease Bound,\n4 at once": "lease_burst4_ms",
        "lease Bound,\n32 at once": "lease_burst32_ms",
    }
    series: dict[str, list[float]] = {
        label: list(samples[key]) for label, key in wanted.items() if samples.get(key)
    }
    if not series:
        return None
    figure, axes = plt.subplots(figsize=(7, 4))
    axes.boxplot(list(series.values()), whis=(0, 100))
    axes.set_xticks(range(1, len(series) + 1), list(series))
    for position, values in enumerate(series.values(), start=1):
        axes.scatter([position] * len(values), values, s=10, alpha=0.6, color="tab:blue")
    axes.axhline(100, color="tab:red", linestyle="--", linewidth=1, label="target 100 ms")
    axes.set_ylabel("ms")
    axes.set_title("Reactivity: from the cause to the API showing the effect")
    axes.legend()
    return figure


def client(plt: Any, results: dict[str, Any], samples: dict[str, Any]) -> Any:
    series = {
        "direct POST /invoke\nto a warm agent": samples.get("client_direct_ms"),
        "client.lease\nbound, token read": samples.get("bind_ms"),
        "client.call\nthrough the gateway": samples.get("client_call_ms"),
    }
    shown = {label: values for label, values in series.items() if values}
    if not shown:
        return None
    figure, axes = plt.subplots(figsize=(7, 4))
    axes.boxplot(list(shown.values()), whis=(1, 99))
    axes.set_xticks(range(1, len(shown) + 1), list(shown))
    axes.set_yscale("log")
    axes.set_ylabel("ms (log scale)")
    axes.set_title(f"The Python client, {(results.get('client') or {}).get('calls')} of each")
    return figure


def simulated(plt: Any, results: dict[str, Any], samples: dict[str, Any]) -> Any:
    figures = results.get("simulated") or {}
    steps = figures.get("steps") or []
    if not steps:
        return None
    figure, (memory, cpu, times) = plt.subplots(1, 3, figsize=(16, 4))
    agents = [s["agents"] for s in steps]
    labels = [f"{s['pools']} pools" for s in steps]
    memory.scatter(agents, [s["rss_mib"] for s in steps], color="tab:red")
    for x, y, label in zip(agents, [s["rss_mib"] for s in steps], labels, strict=True):
        memory.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    memory.set_xscale("log")
    memory.set_xlabel("simulated agents (log scale)")
    memory.set_ylabel("operator resident memory once settled (MiB)")
    memory.set_ylim(bottom=0)
    if figures.get("rss_per_agent_kib") is None:
        memory.set_title("Operator memory (a slope needs three sizes)")
    else:
        memory.set_title(
            f"RSS ~ {figures['rss_base_mib']} MiB + {figures['rss_per_pool_kib']} KiB/pool"
            f" + {figures['rss_per_agent_kib']} KiB/agent"
        )
    _simulated_cpu(cpu, steps, agents)
    for key, label in (
        ("plan_p99_ms", "spec change -> plan applied p99 (ms)"),
        ("checkout_p99_ms", "warm checkout p99 (ms, bucket bound)"),
    ):
        times.plot(agents, [s[key] for s in steps], marker="o", linestyle="none", label=label)
    known = [s for s in steps if s.get("recovery_seconds") is not None]
    times.plot(
        [s["agents"] for s in known],
        [s["recovery_seconds"] * 1000 for s in known],
        marker="o",
        linestyle="none",
        label="SIGKILL -> every busy agent known (ms; missing where it was not)",
    )
    times.set_xscale("log")
    times.set_yscale("log")
    times.set_xlabel("simulated agents (log scale)")
    times.set_ylabel("ms (log scale)")
    times.set_title("One operator: latency against size")
    times.grid(True, which="both", alpha=0.3)
    times.legend(fontsize=8)
    return figure


def _simulated_cpu(axes: Any, steps: list[dict[str, Any]], agents: list[int]) -> None:
    """CPU against size: what settling cost the operator and the cluster, and what the settled
    operator spends doing nothing, so the curve says which of them grows first."""
    for key, label in (
        ("settle_operator_cpu_seconds", "operator CPU to settle (s)"),
        ("settle_cluster_cpu_seconds", "cluster CPU to settle (s; API server + kubelet)"),
    ):
        measured = [(a, s[key]) for a, s in zip(agents, steps, strict=True) if s.get(key)]
        if measured:
            axes.plot(*zip(*measured, strict=True), marker="o", linestyle="none", label=label)
    idle = [
        (a, s["idle_operator_cpu_cores"] * 100)
        for a, s in zip(agents, steps, strict=True)
        if s.get("idle_operator_cpu_cores")
    ]
    if idle:
        axes.plot(
            *zip(*idle, strict=True),
            marker="s",
            linestyle="none",
            label="settled operator (% of a core)",
        )
    if not axes.lines:
        # Results from before CPU was recorded: an empty panel that says so, not a log axis
        # over no data.
        axes.set_title("One operator: CPU against size (not recorded in these results)")
        return
    for step, x in zip(steps, agents, strict=True):
        axes.annotate(
            f"{step['pools']} pools",
            (x, step.get("settle_operator_cpu_seconds") or 1),
            textcoords="offset points",
            xytext=(4, 4),
            fontsize=8,
        )
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("simulated agents (log scale)")
    axes.set_title("One operator: CPU against size")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)


PAINTERS = {
    "overhead": overhead,
    "warm_vs_cold": warm_vs_cold,
    "scale": scale,
    "reactivity": latency,
    "client": client,
    "simulated": simulated,
}
