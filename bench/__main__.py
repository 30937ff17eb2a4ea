"""``python -m bench``: the pool measured against direct calls and a pod per item, in one run.

Runs the scenarios of issue 8 on the local cluster, each on a fresh cluster and operator process:
overhead and API economy (1, 3), warm against cold (2), scale (4), reactivity (5), lease binding
(6), the Python client beside a direct call (7), one operator against up to 1,000 pools of
simulated agents (8, :mod:`bench.simulated`), a 100,000-item run read back whole (9,
:mod:`bench.huge`), fifty runs of mixed priorities on one pool (10, :mod:`bench.priorities`),
agents with several slots against one-slot pods (11, :mod:`bench.slots`), calls and casts
through the gateway beside direct calls (12, :mod:`bench.gateway`), requests forwarded to a pool
of plain HTTP servers beside the same requests sent straight to them (13,
:mod:`bench.forwarding`), a hundred MCP sessions at once through the gateway over a pool of ten
MCP servers beside the same sessions straight to them (14, :mod:`bench.mcpsessions`), and pools
whose agents never turn Ready or whose pods are refused,
with and without maxUnready (:mod:`bench.runaway`), a rollout of a busy pool
(:mod:`bench.rollout`) and a warm schedule's window opening to its agents
Ready (:mod:`bench.schedules`). It prints
a summary table beside the targets, writes ``results.json`` (every figure the issue names, null
where a scenario did not run, and the machine) and PNG plots under ``plots/`` in ``--out`` (default
``bench/``); with ``--only`` the sections of the scenarios left out keep their figures from the
``results.json`` already there. ``--quick`` uses smaller counts and finishes in about two minutes;
``.ci/run`` runs it as a smoke check. Targets are reported, never asserted: the exit code is 1 only
when a scenario crashed, not when it was slow or missed a target.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench import (
    clients,
    forwarding,
    gateway,
    huge,
    leasing,
    machine,
    mcpsessions,
    overhead,
    plots,
    priorities,
    reactivity,
    report,
    rollout,
    runaway,
    scale,
    schedules,
    simulated,
    slots,
    warmcold,
)

ROOT = Path(__file__).resolve().parents[1]

#: What scenario 6 reports on each cluster it runs on.
LEASE_FIGURES = [
    "p50_ms",
    "p99_ms",
    "burst4_p50_ms",
    "burst32_p50_ms",
    "writes_per_lease",
    "writes_per_lease_without_events",
    "floor_p50_ms",
    "floor_burst4_p50_ms",
    "floor_burst32_p50_ms",
    "writes_floor_p50_ms",
    "writes_floor_burst4_p50_ms",
    "writes_floor_burst32_p50_ms",
]
#: Every figure results.json must hold, by section; null when its scenario did not run.
REQUIRED = {
    "overhead": ["throughput_ratio", "p50_ms", "p95_ms", "p99_ms"],
    "warm_vs_cold": ["ratio", "theoretical_ratio"],
    "api": ["writes_per_item", "reads_per_item"],
    "http_batched": [
        "ratio_to_inline",
        "operator_cpu_ms_per_item",
        "inline_operator_cpu_ms_per_item",
    ],
    "scale": ["items_per_second", "peak_rss_mib", "object_bytes"],
    "huge": [
        "items",
        "items_per_second",
        "peak_rss_mib",
        "object_bytes",
        "results_read_seconds",
        "client_results_read_seconds",
        "results_exactly_once",
    ],
    "reactivity": ["overflow_ms", "replacement_ms", "checkout_p99_ms"],
    "lease": [*LEASE_FIGURES, "bind_p50_ms", "bind_p99_ms"],
    # Only with --kubeconfig; a run without it keeps the figures of the last run with it.
    "lease_real": LEASE_FIGURES,
    "client": ["call_p50_ms", "call_p99_ms", "direct_p50_ms", "direct_p99_ms"],
    "schedule": ["window_to_first_pod_ms", "window_to_ready_ms", "ready_over_cold_start"],
    "simulated": ["max_agents", "max_pools", "checkout_p99_ms", "recovery_seconds"],
    "priorities": ["max_wait_seconds", "inversions", "fifo_breaks", "starved"],
    "runaway": ["pods_unbounded", "pods_bounded", "pods_ratio", "refused_creates_per_pool_minute"],
    "rollout": [
        "throughput_ratio",
        "rollout_seconds",
        "fewest_ready_agents",
        "most_pods",
        "items_failed",
    ],
    "slots": ["ratio_to_ideal", "items_per_second", "speedup_over_one_slot", "overhead_p95_ms"],
    "gateway": [
        "direct_p50_ms",
        "call_p50_ms",
        "overhead_p50_ms",
        "overhead_p99_ms",
        "cast_p50_ms",
        "lease_call_p50_ms",
        "calls_per_second",
        "throughput_ratio",
        "api_requests_per_call",
        "api_requests_per_cast",
        "operator_cpu_ms_per_call",
    ],
    "forwarding": [
        "first_byte_p50_ms",
        "first_byte_p99_ms",
        "first_byte_overhead_p50_ms",
        "first_byte_overhead_p99_ms",
        "last_byte_overhead_p50_ms",
        "direct_p50_ms",
        "proxy_p50_ms",
        "call_p50_ms",
        "overhead_p50_ms",
        "overhead_p99_ms",
        "path_cpu_ms_per_request",
        "api_writes_per_request",
        "status_writes_per_second",
        "requests_per_second",
        "throughput_ratio",
    ],
    "mcp_sessions": [
        "open_all_seconds",
        "initialize_p50_ms",
        "initialize_p99_ms",
        "call_p50_ms",
        "call_p99_ms",
        "direct_open_all_seconds",
        "direct_initialize_p50_ms",
        "direct_call_p50_ms",
        "direct_call_p99_ms",
        "call_p50_ratio",
        "alone_call_p50_ms",
        "direct_alone_call_p50_ms",
        "failed_sessions",
        "most_sessions_on_an_agent",
        "all_free_again",
    ],
}

FULL = {
    "overhead": 2000,
    "warm_vs_cold": 200,
    "warm_vs_cold_turns": 3,
    "scale": 20000,
    "huge": 100000,
    "samples": 5,
    "warm": 500,
    "leases": 50,
    "lease_bursts": 5,
    "calls": 200,
    "simulated_sizes": len(simulated.SIZES),
    "simulated_budget_seconds": 900,
    "simulated_idle_seconds": simulated.IDLE_SECONDS,
    "priority_runs": priorities.RUNS,
    "slots": 3200,
    "slots_turns": 3,
    "gateway_calls": 2000,
    "gateway_seconds": 10,
    "forward_requests": 2000,
    "forward_streams": 200,
    "forward_seconds": 10,
    "mcp_sessions": 100,
    "mcp_agents": 10,
    "mcp_notes": 5,
    "mcp_turns": 2,
    "mcp_alone_calls": 500,
    "runaway_pools": 20,
    "runaway_agents": 20,
    "runaway_seconds": 30,
    "rollout_agents": 100,
    "rollout_item_ms": 2000,
    "rollout_before_seconds": 10,
    "schedule_samples": 3,
}
QUICK = {
    "overhead": 240,
    "warm_vs_cold": 40,
    "warm_vs_cold_turns": 1,
    "scale": 1000,
    "huge": 2000,
    "samples": 2,
    "warm": 60,
    "leases": 10,
    "lease_bursts": 1,
    "calls": 10,
    "simulated_sizes": 1,
    "simulated_budget_seconds": 300,
    "simulated_idle_seconds": 15.0,
    "priority_runs": 12,
    "slots": 640,
    "slots_turns": 1,
    "gateway_calls": 200,
    "gateway_seconds": 2,
    "forward_requests": 40,
    "forward_streams": 12,
    "forward_seconds": 1,
    "mcp_sessions": 6,
    "mcp_agents": 2,
    "mcp_notes": 3,
    "mcp_turns": 1,
    "mcp_alone_calls": 20,
    "runaway_pools": 5,
    "runaway_agents": 10,
    "runaway_seconds": 10,
    "rollout_agents": 12,
    "rollout_item_ms": 1000,
    "rollout_before_seconds": 3,
    "schedule_samples": 1,
}

Scenario = Callable[[Path, dict[str, int]], Awaitable[dict[str, Any]]]
SCENARIOS: dict[str, Scenario] = {
    "overhead": lambda work, n: overhead.run(work, items=n["overhead"]),
    "warm_vs_cold": lambda work, n: warmcold.run(
        work, items=n["warm_vs_cold"], turns=n["warm_vs_cold_turns"]
    ),
    "scale": lambda work, n: scale.run(work, items=n["scale"]),
    "huge": lambda work, n: huge.run(work, items=n["huge"]),
    "reactivity": lambda work, n: reactivity.run(work, samples=n["samples"], items=n["warm"]),
    "lease": lambda work, n: leasing.run(work, leases=n["leases"], bursts=n["lease_bursts"]),
    "client": lambda work, n: clients.run(work, calls=n["calls"]),
    "simulated": lambda work, n: simulated.run(
        work,
        sizes=n["simulated_sizes"],
        budget=n["simulated_budget_seconds"],
        idle=n["simulated_idle_seconds"],
    ),
    "priorities": lambda work, n: priorities.run(work, runs=n["priority_runs"]),
    "slots": lambda work, n: slots.run(work, items=n["slots"], turns=n["slots_turns"]),
    "gateway": lambda work, n: gateway.run(
        work, calls=n["gateway_calls"], seconds=n["gateway_seconds"]
    ),
    "forwarding": lambda work, n: forwarding.run(
        work,
        requests=n["forward_requests"],
        streams=n["forward_streams"],
        seconds=n["forward_seconds"],
    ),
    "mcp_sessions": lambda work, n: mcpsessions.run(
        work,
        sessions=n["mcp_sessions"],
        agents=n["mcp_agents"],
        notes=n["mcp_notes"],
        turns=n["mcp_turns"],
        alone=n["mcp_alone_calls"],
    ),
    "runaway": lambda work, n: runaway.run(
        work, pools=n["runaway_pools"], per_pool=n["runaway_agents"], seconds=n["runaway_seconds"]
    ),
    "rollout": lambda work, n: rollout.run(
        work,
        agents=n["rollout_agents"],
        item_seconds=n["rollout_item_ms"] / 1000,
        before=n["rollout_before_seconds"],
    ),
    "schedule": lambda work, n: schedules.run(work, samples=n["schedule_samples"]),
}

#: The scenarios that also run on a cluster of the caller's, given ``--kubeconfig``.
OnCluster = Callable[[Path, dict[str, int], Path], Awaitable[dict[str, Any]]]
ON_A_CLUSTER: dict[str, OnCluster] = {
    "lease": lambda work, n, kubeconfig: leasing.run(
        work, leases=n["leases"], bursts=n["lease_bursts"], kubeconfig=kubeconfig
    ),
}

# (section, figure, target text, test): what the issue asks of this machine (2 cores).
TARGETS: list[tuple[str, str, str, Callable[[Any, dict[str, Any]], bool]]] = [
    ("overhead", "throughput_ratio", ">= 0.8", lambda v, s: v >= 0.8),
    ("overhead", "p50_ms", "", lambda v, s: True),
    ("overhead", "p95_ms", "<= 2", lambda v, s: v <= 2),
    ("overhead", "p99_ms", "", lambda v, s: True),
    (
        "warm_vs_cold",
        "ratio",
        "theory +-15%",
        lambda v, s: abs(v / s["theoretical_ratio"] - 1) <= 0.15,
    ),
    ("warm_vs_cold", "theoretical_ratio", "", lambda v, s: True),
    ("http_batched", "ratio_to_inline", ">= 0.8", lambda v, s: v >= 0.8),
    ("http_batched", "operator_cpu_ms_per_item", "", lambda v, s: True),
    ("http_batched", "inline_operator_cpu_ms_per_item", "", lambda v, s: True),
    ("api", "writes_per_item", "<= 0.02", lambda v, s: v <= 0.02),
    ("api", "reads_per_item", "", lambda v, s: True),
    ("scale", "items_per_second", "", lambda v, s: True),
    ("scale", "peak_rss_mib", "<= 250", lambda v, s: v <= 250),
    ("scale", "object_bytes", "<= 262144", lambda v, s: v <= 262144),
    ("huge", "items", "", lambda v, s: True),
    ("huge", "items_per_second", "", lambda v, s: True),
    ("huge", "peak_rss_mib", "<= 250", lambda v, s: v <= 250),
    ("huge", "object_bytes", "<= 262144", lambda v, s: v <= 262144),
    ("huge", "results_read_seconds", "", lambda v, s: True),
    ("huge", "client_results_read_seconds", "", lambda v, s: True),
    ("huge", "results_exactly_once", "true", lambda v, s: v is True),
    ("reactivity", "overflow_ms", "<= 100", lambda v, s: v <= 100),
    ("reactivity", "replacement_ms", "<= 100", lambda v, s: v <= 100),
    ("reactivity", "checkout_p99_ms", "<= 100", lambda v, s: v <= 100),
    ("lease", "p50_ms", "<= 25", lambda v, s: v <= 25),
    ("lease", "p99_ms", "", lambda v, s: True),
    ("lease", "burst4_p50_ms", "<= 50", lambda v, s: v <= 50),
    ("lease", "burst32_p50_ms", "<= 150", lambda v, s: v <= 150),
    ("lease", "writes_per_lease", "<= 5", lambda v, s: v <= 5),
    ("lease", "writes_per_lease_without_events", "<= 5", lambda v, s: v <= 5),
    ("lease", "floor_burst32_p50_ms", "", lambda v, s: True),
    ("lease", "writes_floor_burst32_p50_ms", "", lambda v, s: True),
    ("lease_real", "p50_ms", "<= 25", lambda v, s: v <= 25),
    ("lease_real", "p99_ms", "", lambda v, s: True),
    ("lease_real", "burst4_p50_ms", "<= 50", lambda v, s: v <= 50),
    ("lease_real", "burst32_p50_ms", "<= 150", lambda v, s: v <= 150),
    ("lease_real", "writes_per_lease", "<= 5", lambda v, s: v <= 5),
    ("lease_real", "writes_per_lease_without_events", "<= 5", lambda v, s: v <= 5),
    ("lease_real", "floor_burst32_p50_ms", "", lambda v, s: True),
    ("lease_real", "writes_floor_burst32_p50_ms", "", lambda v, s: True),
    ("lease", "bind_p50_ms", "", lambda v, s: True),
    ("lease", "bind_p99_ms", "", lambda v, s: True),
    ("client", "call_p50_ms", "", lambda v, s: True),
    ("client", "call_p99_ms", "", lambda v, s: True),
    ("client", "direct_p50_ms", "", lambda v, s: True),
    ("client", "direct_p99_ms", "", lambda v, s: True),
    ("simulated", "max_agents", "", lambda v, s: True),
    ("simulated", "max_pools", "", lambda v, s: True),
    ("simulated", "checkout_p99_ms", "", lambda v, s: True),
    ("simulated", "recovery_seconds", "", lambda v, s: True),
    ("priorities", "max_wait_seconds", "", lambda v, s: True),
    ("priorities", "inversions", "0", lambda v, s: v == 0),
    ("priorities", "fifo_breaks", "0", lambda v, s: v == 0),
    ("priorities", "starved", "0", lambda v, s: v == 0),
    ("slots", "ratio_to_ideal", ">= 0.85", lambda v, s: v >= 0.85),
    ("slots", "items_per_second", "", lambda v, s: True),
    ("slots", "speedup_over_one_slot", "", lambda v, s: True),
    ("slots", "overhead_p95_ms", "", lambda v, s: True),
    ("gateway", "direct_p50_ms", "", lambda v, s: True),
    ("gateway", "call_p50_ms", "", lambda v, s: True),
    ("gateway", "overhead_p50_ms", "<= 1", lambda v, s: v <= 1),
    ("gateway", "overhead_p99_ms", "<= 10", lambda v, s: v <= 10),
    ("gateway", "cast_p50_ms", "", lambda v, s: True),
    ("gateway", "lease_call_p50_ms", "", lambda v, s: True),
    ("gateway", "calls_per_second", "", lambda v, s: True),
    ("gateway", "throughput_ratio", ">= 0.8", lambda v, s: v >= 0.8),
    ("gateway", "api_requests_per_call", "<= 0.01", lambda v, s: v <= 0.01),
    ("gateway", "api_requests_per_cast", "<= 0.01", lambda v, s: v <= 0.01),
    ("gateway", "operator_cpu_ms_per_call", "", lambda v, s: True),
    ("forwarding", "first_byte_p50_ms", "", lambda v, s: True),
    ("forwarding", "first_byte_overhead_p50_ms", "<= 2", lambda v, s: v <= 2),
    ("forwarding", "first_byte_overhead_p99_ms", "<= 10", lambda v, s: v <= 10),
    ("forwarding", "last_byte_overhead_p50_ms", "", lambda v, s: True),
    ("forwarding", "proxy_p50_ms", "", lambda v, s: True),
    ("forwarding", "overhead_p50_ms", "<= 1", lambda v, s: v <= 1),
    ("forwarding", "overhead_p99_ms", "", lambda v, s: True),
    ("forwarding", "path_cpu_ms_per_request", "", lambda v, s: True),
    ("forwarding", "api_writes_per_request", "0", lambda v, s: v == 0),
    ("forwarding", "status_writes_per_second", "<= 1", lambda v, s: v <= 1),
    ("forwarding", "requests_per_second", "", lambda v, s: True),
    ("forwarding", "throughput_ratio", "", lambda v, s: True),
    ("mcp_sessions", "open_all_seconds", "", lambda v, s: True),
    ("mcp_sessions", "initialize_p50_ms", "", lambda v, s: True),
    ("mcp_sessions", "initialize_p99_ms", "", lambda v, s: True),
    ("mcp_sessions", "call_p50_ms", "", lambda v, s: True),
    ("mcp_sessions", "call_p99_ms", "", lambda v, s: True),
    ("mcp_sessions", "call_p50_ratio", "", lambda v, s: True),
    ("mcp_sessions", "alone_call_p50_ms", "", lambda v, s: True),
    ("mcp_sessions", "alone_call_p50_ratio", "", lambda v, s: True),
    ("mcp_sessions", "failed_sessions", "0", lambda v, s: v == 0),
    ("mcp_sessions", "most_sessions_on_an_agent", "<= 10", lambda v, s: v <= s["slots"]),
    ("mcp_sessions", "all_free_again", "true", lambda v, s: v is True),
    ("runaway", "pods_unbounded", "", lambda v, s: True),
    ("runaway", "pods_bounded", "", lambda v, s: True),
    ("runaway", "pods_ratio", "", lambda v, s: True),
    ("runaway", "refused_creates_per_pool_minute", "< 60", lambda v, s: v < 60),
    ("rollout", "throughput_ratio", ">= 0.75", lambda v, s: v >= 0.75),
    ("rollout", "rollout_seconds", "", lambda v, s: True),
    ("rollout", "fewest_ready_agents", "", lambda v, s: True),
    ("rollout", "most_pods", "", lambda v, s: True),
    ("rollout", "items_failed", "0", lambda v, s: v == 0),
    ("schedule", "window_to_first_pod_ms", "", lambda v, s: True),
    ("schedule", "window_to_ready_ms", "", lambda v, s: True),
    ("schedule", "ready_over_cold_start", "", lambda v, s: True),
]


def summary(results: dict[str, Any]) -> str:
    lines = [f"{'figure':<32}{'value':>12}  {'target':<14}verdict"]
    for section, figure, target, test in TARGETS:
        values = results.get(section) or {}
        value = values.get(figure)
        if value is None:
            shown, verdict = "-", "not run"
        else:
            shown = f"{value:g}" if isinstance(value, float | int) else str(value)
            verdict = ("met" if test(value, values) else "MISSED") if target else ""
        lines.append(f"{section + '.' + figure:<32}{shown:>12}  {target:<14}{verdict}")
    return "\n".join(lines)


def explain(results: dict[str, Any]) -> str:
    """The sentences that say how the figures were taken, printed under the table."""
    notes = []
    if (o := results.get("overhead")) and o.get("throughput_ratio") is not None:
        notes.append(
            f"overhead: {o['items']} items, cap {o['cap']}, {o['agents']} echo agents; "
            f"direct {o['direct']['items_per_second']} items/s, "
            f"pool {o['pool']['items_per_second']} items/s on the agents "
            f"(end to end {o['pool']['end_to_end_items_per_second']}), through the HTTP source "
            f"{o['http_source']['items_per_second']} items/s (ratio "
            f"{o['http_source']['throughput_ratio']}, overhead p50/p95/p99 "
            f"{o['http_source']['gap_p50_ms']}/{o['http_source']['gap_p95_ms']}/"
            f"{o['http_source']['gap_p99_ms']} ms, "
            f"{o['http_source']['writes_per_item']} writes per item); operator CPU per item "
            f"{o['pool']['operator_cpu_ms_per_item']} ms (HTTP source "
            f"{o['http_source']['operator_cpu_ms_per_item']} ms), direct client's "
            f"{o['direct']['client_cpu_ms_per_item']} ms; "
            f"per-item overhead = the pool's idle gap on an agent between two items, less the "
            f"direct client's at the same percentile (pool p50/p95/p99 "
            f"{o['pool']['gap_p50_ms']}/{o['pool']['gap_p95_ms']}/{o['pool']['gap_p99_ms']} ms, "
            f"direct {o['direct']['gap_p50_ms']}/{o['direct']['gap_p95_ms']}/"
            f"{o['direct']['gap_p99_ms']} ms)"
        )
    if (w := results.get("warm_vs_cold")) and w.get("ratio") is not None:
        notes.append(
            f"warm vs cold: theoretical ratio = cold / warm where cold = items/cap*(startup+work) "
            f"= {w['theoretical_cold_s']} s and warm = startup + items*work/cap = "
            f"{w['theoretical_warm_s']} s; measured {w['cold_s']} s / {w['warm_s']} s "
            f"(from creating the pool to the run's end; the turn with the median ratio of "
            f"{', '.join(str(t['ratio']) for t in w['turns'])})"
        )
    if (b := results.get("http_batched")) and b.get("ratio_to_inline") is not None:
        notes.append(
            f"http batched: the same items from an HTTP source answering up to each request's "
            f"max, right after each turn's inline run: {b['items_per_second']} items/s against "
            f"{b['inline_items_per_second']} inline (one item a request: "
            f"{b['single_items_per_second']}); operator CPU per item "
            f"{b['operator_cpu_ms_per_item']} ms batched, "
            f"{b['inline_operator_cpu_ms_per_item']} ms inline, "
            f"{b['single_operator_cpu_ms_per_item']} ms one item a request; "
            f"{b['requests_per_item']} requests per item; the turn with the median ratio of "
            f"{', '.join(str(t['ratio_to_inline']) for t in b['turns'])}"
        )
    if (a := results.get("api")) and a.get("writes_per_item") is not None:
        writes = ", ".join(f"{k}: {v}" for k, v in a["by_request"].items())
        notes.append(
            f"api: {a['writes']} writes, {a['reads']} reads for {a['items']} items ({writes})"
        )
    if (s := results.get("scale")) and s.get("items_per_second") is not None:
        notes.append(
            f"scale: {s['items']} items in {s['seconds']} s, "
            f"{s['agents_at_end']} agents at the end, {s['result_configmaps']} result ConfigMaps"
        )
    if (h := results.get("huge")) and h.get("items_per_second") is not None:
        notes.append(
            f"huge: {h['items']} items from a batched HTTP source ({h['source_requests']} "
            f"requests) at cap {h['cap']} in {h['seconds']} s, {h['agents_at_end']} agents at "
            f"the end, {h['result_configmaps']} result ConfigMaps; read back by agentpool "
            f"results in {h['results_read_seconds']} s and by the client's Run.results() in "
            f"{h['client_results_read_seconds']} s, every item exactly once: "
            f"{h['results_exactly_once']}"
        )
    for name in ("lease", "lease_real"):
        lease = results.get(name) or {}
        if lease.get("burst4_p50_ms") is None:
            continue
        kinds = ", ".join(f"{k}: {v}" for k, v in sorted(lease["writes_by_kind"].items()))
        where = "on a real control plane" if name == "lease_real" else "on the local cluster"
        notes.append(
            f"{name}: {where}, {lease['agents']} echo agents; create -> Bound one at a time "
            f"p50/p90/p99 {lease['p50_ms']}/{lease['p90_ms']}/{lease['p99_ms']} ms "
            f"({lease['leases']} leases), in bursts of 4 p50/max {lease['burst4_p50_ms']}/"
            f"{lease['burst4_max_ms']} ms and of {lease['agents']} p50/max "
            f"{lease['burst32_p50_ms']}/{lease['burst32_max_ms']} ms ({lease['bursts']} "
            f"bursts each); a lease's whole life {lease['writes_per_lease']} writes and "
            f"{lease['requests_per_lease']} requests ({kinds}), "
            f"{lease['writes_per_lease_without_events']} writes with lease Events off; a bare "
            f"binder on the same server one at a time p50 {lease['floor_p50_ms']} ms, in bursts "
            f"of 4 {lease['floor_burst4_p50_ms']} ms and of {lease['agents']} "
            f"{lease['floor_burst32_p50_ms']} ms; the same binder making the operator's own "
            f"writes beside the idle agents {lease['writes_floor_p50_ms']}, "
            f"{lease['writes_floor_burst4_p50_ms']} and {lease['writes_floor_burst32_p50_ms']} ms"
        )
    if (c := results.get("client")) and c.get("call_p50_ms") is not None:
        lease = results.get("lease") or {}
        notes.append(
            f"client: {c['calls']} of each, one at a time, pool of 4 echo agents; client.call "
            f"(through the gateway) p50/p99 {c['call_p50_ms']}/{c['call_p99_ms']} ms against "
            f"a direct POST /invoke to a warm agent {c['direct_p50_ms']}/{c['direct_p99_ms']} ms; "
            f"client.lease bound with its token read {lease.get('bind_p50_ms')}/"
            f"{lease.get('bind_p99_ms')} ms, released (lease gone) {lease.get('release_p50_ms')}/"
            f"{lease.get('release_p99_ms')} ms"
        )
    if (m := results.get("simulated")) and m.get("max_agents") is not None:
        sizes = ", ".join(f"{s['pools']}x{s['agents_per_pool']}" for s in m["steps"])
        big = max(m["steps"], key=lambda s: (s["agents"], s["pools"]))
        notes.append(
            f"simulated: sizes reached (pools x agents) {sizes}; operator RSS "
            f"{m['rss_base_mib']} MiB + {m['rss_per_pool_kib']} KiB a pool + "
            f"{m['rss_per_agent_kib']} KiB an agent; spec change to plan applied p99 "
            f"{m['plan_p99_ms']} ms at the largest; after a SIGKILL the new operator knew "
            f"{big['busy_known_again']} of {big['busy_at_kill']} busy "
            f"agents there within {m.get('recovery_limit_seconds')} s; stopped: {m['stopped']}"
        )
    if (p := results.get("priorities")) and p.get("max_wait_seconds") is not None:
        levels = ", ".join(f"{k}: {v} s" for k, v in p["max_wait_by_priority"].items())
        warm = p["warm"]
        notes.append(
            f"priorities: {p['runs']} runs of {p['items_per_run']} items at cap {p['cap']}, "
            f"priorities {p['levels']} in turn, on {p['agents']} agents of "
            f"{p['work_seconds']} s an item; {p['queued_before_gate']} of "
            f"{p['expected_queued']} checkouts queued before the agents turned Ready; served "
            f"in {p['span_seconds']} s; longest wait by priority {levels}; out of order beyond "
            f"{p['tolerance_seconds']} s: {p['inversions']} inversions, {p['fifo_breaks']} FIFO "
            f"breaks; unfinished {len(p['unfinished'])}; the same runs created on the Ready "
            f"pool: longest wait {warm['max_wait_seconds']} s, {warm['inversions']} inversions, "
            f"{warm['fifo_breaks']} FIFO breaks, unfinished {len(warm['unfinished'])}"
        )
    if (t := results.get("slots")) and t.get("ratio_to_ideal") is not None:
        pools = ", ".join(
            f"{p['pods']}x{p['slots']} {p['items_per_second']}/{p['ideal_items_per_second']} "
            f"items/s (slot gap p95 {p['gap_p95_ms']} ms)"
            for p in t["pools"].values()
        )
        notes.append(
            f"slots: sleep-{t['sleep_ms']:g} ms agents at cap {t['cap']}, pods x slots measured/"
            f"ideal: {pools}; slots 8 serve {t['speedup_over_one_slot']}x slots 1 on 4 pods "
            f"(ideal 8) and {t['ratio_to_32_pods']} of 32 one-slot pods"
        )
    if (g := results.get("gateway")) and g.get("call_p50_ms") is not None:
        notes.append(
            f"gateway: {g['agents']} echo agents of {g['slots']} slots; {g['calls']} of each "
            f"kind one at a time, in blocks taken in turn: direct POST /invoke p50/p99 "
            f"{g['direct_p50_ms']}/{g['direct_p99_ms']} ms, client.call through the gateway "
            f"{g['call_p50_ms']}/{g['call_p99_ms']} ms, client.cast {g['cast_p50_ms']}/"
            f"{g['cast_p99_ms']} ms, a lease's life (lease, invoke, release) "
            f"{g['lease_call_p50_ms']}/{g['lease_call_p99_ms']} ms with "
            f"{g['api_requests_per_lease_call']} API requests each; {g['concurrency']} at a "
            f"time for {g['throughput_seconds']} s, twice each in turn (medians): direct "
            f"{g['direct_calls_per_second']} calls/s, gateway {g['calls_per_second']} calls/s "
            f"with {g['api_requests_per_call_at_32']} API requests and "
            f"{g['operator_cpu_ms_per_call_at_32']} ms of operator CPU per call (the operator "
            f"idles at {g['operator_cpu_ms_per_direct_call_at_32']} ms per direct call); CPU "
            f"per call, gateway / direct: the client's {g['client_cpu_ms_per_call_at_32']}/"
            f"{g['client_cpu_ms_per_direct_call_at_32']} ms, the whole machine's "
            f"{g['machine_cpu_ms_per_call_at_32']}/{g['machine_cpu_ms_per_direct_call_at_32']} ms"
        )
    if (f := results.get("forwarding")) and f.get("first_byte_p50_ms") is not None:
        notes.append(
            f"forwarding: {f['agents']} plain HTTP agents of {f['slots']} slots (protocol HTTP, "
            f"FIFO), one aiohttp session, kept-alive, HTTPS to the gateway's proxy path and HTTP "
            f"straight to the agents; {f['streams']} streamed answers of each ({f['stream_events']}"
            f" events over {f['stream_seconds']} s, {f['stream_lanes']} at a time): first byte "
            f"p50/p99 through the gateway {f['first_byte_p50_ms']}/{f['first_byte_p99_ms']} ms, "
            f"direct {f['direct_first_byte_p50_ms']}/{f['direct_first_byte_p99_ms']} ms; last "
            f"byte {f['last_byte_p50_ms']}/{f['last_byte_p99_ms']} ms, direct "
            f"{f['direct_last_byte_p50_ms']}/{f['direct_last_byte_p99_ms']} ms; {f['requests']} "
            f"POST /echo of each one at a time: direct {f['direct_p50_ms']}/{f['direct_p99_ms']} "
            f"ms, through the gateway {f['proxy_p50_ms']}/{f['proxy_p99_ms']} ms, client.call on "
            f"a native pool {f['call_p50_ms']}/{f['call_p99_ms']} ms; CPU per request direct/"
            f"forwarded/call of the client, operator and agents "
            f"{f['path_cpu_ms_per_direct_request']}/{f['path_cpu_ms_per_request']}/"
            f"{f['path_cpu_ms_per_call']} ms (the operator "
            f"{f['operator_cpu_ms_per_request']} ms of a forwarded one), of the whole machine "
            f"{f['machine_cpu_ms_per_direct_request']}/{f['machine_cpu_ms_per_request']}/"
            f"{f['machine_cpu_ms_per_call']} ms; API per forwarded request: "
            f"{f['api_writes_per_request']} writes and {f['status_writes_per_second']} status "
            f"refreshes of the pool a second ({f['api_writes_per_second']} writes a second in all, "
            f"{f['idle_api_writes_per_second']} with no request), {f['api_reviews_per_request']} "
            f"reviews, {f['api_reads_per_request']} reads ({f['forwarded_requests']} requests in "
            f"{f['forwarding_seconds']} s); {f['concurrency']} at a time for "
            f"{f['throughput_seconds']} s, twice each in turn (medians): direct "
            f"{f['direct_requests_per_second']} requests/s, forwarded {f['requests_per_second']} "
            f"requests/s, CPU per request of the client, operator and agents "
            f"{f['path_cpu_ms_per_direct_request_at_32']}/{f['path_cpu_ms_per_request_at_32']} ms"
        )
    if (mc := results.get("mcp_sessions")) and mc.get("call_p50_ms") is not None:
        notes.append(
            f"mcp sessions: a pool of {mc['agents']} MCP servers (examples/http/mcp_server.py) of "
            f"{mc['slots']} slots, sessions on Mcp-Session-Id; {mc['sessions']} sessions at once, "
            f"{mc['turns']} turns each way in turn, each with the mcp SDK's client of its own: "
            f"initialize, then once all are open {mc['notes_per_session']} remember, recall and "
            f"whoami, then a DELETE. Through the gateway: all open in {mc['open_all_seconds']} s "
            f"(initialize p50/p99 {mc['initialize_p50_ms']}/{mc['initialize_p99_ms']} ms), tool "
            f"calls p50/p99 {mc['call_p50_ms']}/{mc['call_p99_ms']} ms; straight to the agents "
            f"round-robin: all open in {mc['direct_open_all_seconds']} s (initialize "
            f"{mc['direct_initialize_p50_ms']}/{mc['direct_initialize_p99_ms']} ms), tool calls "
            f"{mc['direct_call_p50_ms']}/{mc['direct_call_p99_ms']} ms (ratio p50 "
            f"{mc['call_p50_ratio']}, p99 {mc['call_p99_ratio']}); sessions per agent "
            f"{mc['sessions_per_agent_turns']}, busySlots while all open "
            f"{mc['busy_slots_while_open']}; failed {mc['failed_sessions']} through the gateway, "
            f"{mc['direct_failed_sessions']} direct; every agent free again after the close in "
            f"{mc['free_again_seconds_turns']} s; one session alone, {mc['alone_calls']} calls "
            f"one at a time: p50/p99 {mc['alone_call_p50_ms']}/{mc['alone_call_p99_ms']} ms "
            f"through the gateway, {mc['direct_alone_call_p50_ms']}/"
            f"{mc['direct_alone_call_p99_ms']} ms direct ({mc['alone_failed_sessions']} and "
            f"{mc['direct_alone_failed_sessions']} of {mc['alone_sessions']} sessions failed)"
        )
    if (w := results.get("schedule")) and w.get("window_to_ready_ms") is not None:
        notes.append(
            f"schedule: a pool of 1 whose window asks for {w['size']} opens at a whole minute; "
            f"from the window's start the first new pod in {w['window_to_first_pod_ms']} ms, "
            f"all {w['size']} Ready in {w['window_to_ready_ms']} ms (max "
            f"{w['window_to_ready_max_ms']} ms over {w['samples']} samples), against the "
            f"pool's measured cold start of {w['cold_start_ms']} ms"
        )
    return "\n".join(notes)


def fill(results: dict[str, Any]) -> None:
    for section, keys in REQUIRED.items():
        values = results.setdefault(section, {})
        for key in keys:
            values.setdefault(key, None)


async def run_all(
    names: list[str], counts: dict[str, int], work: Path, kubeconfig: Path | None = None
) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    results: dict[str, Any] = {}
    samples: dict[str, Any] = {}
    errors: list[str] = []
    # SIGTERM ends the run as Ctrl-C does: each scenario stops its cluster and operator on the way.
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    for name in names:
        print(f"== {name}", flush=True)
        started = time.monotonic()
        try:
            on_cluster = ON_A_CLUSTER.get(name) if kubeconfig is not None else None
            if on_cluster is not None and kubeconfig is not None:
                found = await on_cluster(work, counts, kubeconfig)
            else:
                found = await SCENARIOS[name](work, counts)
        except TimeoutError as error:
            # Slow is a figure, not a crash: the scenario reports nothing and the run goes on.
            print(f"   {name} did not finish in time: {error}", flush=True)
            results.setdefault("timeouts", []).append(f"{name}: {error}")
            continue
        except Exception:
            text = traceback.format_exc()
            print(text, file=sys.stderr, flush=True)
            errors.append(f"{name}: {text.strip().splitlines()[-1]}")
            continue
        samples.update(found.pop("_samples", {}))
        for section, values in found.items():
            # Two scenarios may add to one section (lease binding, and binding through the
            # client): each keeps the other's figures.
            if isinstance(values, dict):
                results.setdefault(section, {}).update(values)
            else:
                results[section] = values
        print(f"   {time.monotonic() - started:.1f} s", flush=True)
    return results, samples, errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts (about two minutes)")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "bench", help="where results.json and plots/ go"
    )
    parser.add_argument(
        "--only", nargs="+", choices=list(SCENARIOS), help="run only these scenarios"
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, pods)")
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        help="also run the lease scenario on this cluster (a real control plane whose nodes run "
        "the pools' pods as the local kubelet does: python -m tests.controlplane up), with an "
        "operator of its own; its figures go under lease_real",
    )
    args = parser.parse_args(argv)
    counts = QUICK if args.quick else FULL
    names = args.only or list(SCENARIOS)
    work = Path(tempfile.mkdtemp(prefix="agentpool-bench-"))
    host = machine.describe()
    started = time.monotonic()
    try:
        results, samples, errors = asyncio.run(run_all(names, counts, work, args.kubeconfig))
    finally:
        if args.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "results.json"
    if args.only and path.exists():
        # A run of some scenarios keeps the figures of the others from the last full run.
        before = json.loads(path.read_text())
        kept = [k for k in REQUIRED if k not in results and before.get(k)]
        results.update({k: before[k] for k in kept})
        if kept:
            results["kept_from_before"] = {
                "sections": kept,
                "command": before.get("command"),
                "machine": before.get("machine"),
            }
    fill(results)
    results["command"] = "python -m bench" + (" --quick" if args.quick else "")
    results["counts"] = counts
    results["seconds"] = round(time.monotonic() - started, 1)
    results["machine"] = host
    if errors:
        results["errors"] = errors
    path.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    (args.out / "performance.md").write_text(report.render(results))
    print()
    print(summary(results))
    print()
    print(explain(results))
    for drawn in plots.draw(results, samples, args.out / "plots"):
        print(f"wrote {drawn}")
    print(f"wrote {path} in {results['seconds']} s")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
