"""The Markdown of the manual's performance page, from a results.json of ``python -m bench``.

``python -m bench`` writes it as ``performance.md`` beside ``results.json``, so the figures in
docs/performance.md are pasted from a run rather than typed by hand. The simulated scenario's
sizes get a table of their own, from the steps in ``results.json``; what those figures say about
where one operator stops is kept by hand in ``simulated.md``, which no run overwrites.
"""

from __future__ import annotations

from typing import Any

# (section, figure, what it is, target)
ROWS = [
    ("overhead", "throughput_ratio", "pool throughput / direct client's (scenario 1)", ">= 0.8"),
    ("overhead", "p50_ms", "per-item overhead beyond a direct call p50, ms", ""),
    ("overhead", "p95_ms", "per-item overhead beyond a direct call p95, ms", "<= 2"),
    ("overhead", "p99_ms", "per-item overhead beyond a direct call p99, ms", ""),
    ("warm_vs_cold", "ratio", "makespan, a pod per item / warm pool (scenario 2)", "theory +-15%"),
    ("warm_vs_cold", "theoretical_ratio", "the same from the agents' own time", ""),
    ("http_batched", "ratio_to_inline", "batched HTTP source throughput / inline items'", ">= 0.8"),
    ("http_batched", "operator_cpu_ms_per_item", "operator CPU per item, batched HTTP, ms", ""),
    ("http_batched", "inline_operator_cpu_ms_per_item", "operator CPU per item, inline, ms", ""),
    ("api", "writes_per_item", "API writes per item (scenario 3)", "<= 0.02"),
    ("api", "reads_per_item", "API reads per item", ""),
    ("scale", "items_per_second", "items/s, 20,000 via HTTP, cap 64, pool 8-32 (4)", ""),
    ("scale", "peak_rss_mib", "operator peak memory, MiB", "<= 250"),
    ("scale", "object_bytes", "PoolRun object, bytes", "<= 262144"),
    ("huge", "items_per_second", "items/s, 100,000 via batched HTTP, cap 64 (9)", ""),
    ("huge", "peak_rss_mib", "operator peak memory there, MiB", "<= 250"),
    ("huge", "object_bytes", "PoolRun object there, bytes", "<= 262144"),
    ("huge", "results_read_seconds", "agentpool results reads all 100,000 back, s", ""),
    ("huge", "client_results_read_seconds", "the client's Run.results() reads them, s", ""),
    ("reactivity", "overflow_ms", "waiter -> overflow pod created, ms (scenario 5)", "<= 100"),
    ("reactivity", "replacement_ms", "agent killed -> replacement pod created, ms", "<= 100"),
    ("reactivity", "checkout_p99_ms", "warm checkout p99, ms (histogram bucket bound)", "<= 100"),
    ("lease", "p50_ms", "lease created -> Bound p50, ms (scenario 6)", "<= 25"),
    ("lease", "p99_ms", "lease created -> Bound p99, ms", ""),
    ("lease", "burst4_p50_ms", "the same, 4 created at once, p50, ms", "<= 50"),
    ("lease", "burst32_p50_ms", "the same, 32 at once on 32 agents, p50, ms", "<= 150"),
    ("lease", "writes_per_lease", "API writes in a lease's whole life", "<= 5"),
    ("lease", "writes_per_lease_without_events", "the same with lease Events off", "<= 5"),
    ("lease", "floor_burst32_p50_ms", "a bare binder, 32 at once, p50, ms (baseline)", ""),
    (
        "lease",
        "writes_floor_burst32_p50_ms",
        "the binder making the operator's writes, 32 at once, p50, ms",
        "",
    ),
    ("lease_real", "p50_ms", "the same on a real control plane (--kubeconfig), p50, ms", "<= 25"),
    ("lease_real", "burst4_p50_ms", "there, 4 created at once, p50, ms", "<= 50"),
    ("lease_real", "burst32_p50_ms", "there, 32 at once on 32 agents, p50, ms", "<= 150"),
    ("lease_real", "writes_per_lease", "there, API writes in a lease's whole life", "<= 5"),
    ("lease_real", "writes_per_lease_without_events", "there, with lease Events off", "<= 5"),
    ("lease_real", "floor_burst32_p50_ms", "there, a bare binder, 32 at once, p50, ms", ""),
    (
        "lease_real",
        "writes_floor_burst32_p50_ms",
        "there, the binder making the operator's writes, 32 at once, p50, ms",
        "",
    ),
    ("lease", "bind_p50_ms", "client.lease: bound and its token read, p50, ms (7)", ""),
    ("lease", "bind_p99_ms", "client.lease: bound and its token read, p99, ms", ""),
    ("lease", "release_p50_ms", "client.lease: block left -> lease gone, p50, ms", ""),
    ("client", "call_p50_ms", "client.call (through the gateway) p50, ms", ""),
    ("client", "call_p99_ms", "client.call p99, ms", ""),
    ("client", "direct_p50_ms", "direct POST /invoke to a warm agent p50, ms", ""),
    ("client", "direct_p99_ms", "direct POST /invoke to a warm agent p99, ms", ""),
    ("simulated", "max_agents", "simulated agents one operator held (scenario 8)", ""),
    ("simulated", "max_pools", "pools it held", ""),
    ("simulated", "checkout_p99_ms", "warm checkout p99 there, ms (bucket bound)", ""),
    ("simulated", "recovery_seconds", "operator SIGKILL -> every busy agent known, s", ""),
    ("priorities", "max_wait_seconds", "50 runs, 3 priorities, 4 agents: longest wait, s (10)", ""),
    ("priorities", "inversions", "items served before a waiting higher priority's", "0"),
    ("priorities", "fifo_breaks", "items served before an earlier waiter of their priority", "0"),
    ("slots", "ratio_to_ideal", "4 pods x 8 slots, sleep-100 ms: throughput / ideal", ">= 0.85"),
    ("slots", "speedup_over_one_slot", "slots 8 / slots 1 on 4 pods (ideal 8)", ""),
    ("slots", "ratio_to_32_pods", "4 pods x 8 slots / 32 one-slot pods (ideal 1)", ""),
    ("slots", "overhead_p95_ms", "a freed slot's wait for its next item p95, ms", ""),
    ("gateway", "direct_p50_ms", "direct POST /invoke, 8 agents, one at a time, p50, ms (12)", ""),
    ("gateway", "call_p50_ms", "client.call through the gateway p50, ms", ""),
    ("gateway", "overhead_p50_ms", "gateway call beyond a direct call p50, ms", "<= 1"),
    ("gateway", "overhead_p99_ms", "gateway call beyond a direct call p99, ms", "<= 10"),
    ("gateway", "cast_p50_ms", "client.cast through the gateway p50, ms", ""),
    ("gateway", "lease_call_p50_ms", "a lease's life (lease, invoke, release) p50, ms", ""),
    ("gateway", "calls_per_second", "gateway calls/s, 32 at a time, one operator", ""),
    ("gateway", "throughput_ratio", "gateway calls/s / direct calls/s, 32 at a time", ">= 0.8"),
    ("gateway", "api_requests_per_call", "API requests per gateway call", "<= 0.01"),
    ("gateway", "api_requests_per_cast", "API requests per gateway cast", "<= 0.01"),
    ("gateway", "operator_cpu_ms_per_call", "operator CPU per gateway call, ms", ""),
    (
        "forwarding",
        "direct_first_byte_p50_ms",
        "GET /stream straight to an HTTP agent, first byte p50, ms (13)",
        "",
    ),
    ("forwarding", "first_byte_p50_ms", "the same through the gateway's proxy path, p50, ms", ""),
    (
        "forwarding",
        "first_byte_overhead_p50_ms",
        "first byte through the gateway beyond direct, p50, ms",
        "<= 2",
    ),
    (
        "forwarding",
        "first_byte_overhead_p99_ms",
        "first byte through the gateway beyond direct, p99, ms",
        "<= 10",
    ),
    (
        "forwarding",
        "last_byte_overhead_p50_ms",
        "last byte of a 1.2 s stream beyond direct, p50, ms",
        "",
    ),
    (
        "forwarding",
        "direct_p50_ms",
        "POST /echo straight to an HTTP agent, one at a time, p50, ms",
        "",
    ),
    ("forwarding", "proxy_p50_ms", "the same through the gateway's proxy path, p50, ms", ""),
    ("forwarding", "call_p50_ms", "client.call on a native pool beside it, p50, ms", ""),
    ("forwarding", "overhead_p50_ms", "forwarded request beyond direct, p50, ms", "<= 1"),
    ("forwarding", "overhead_p99_ms", "forwarded request beyond direct, p99, ms", ""),
    (
        "forwarding",
        "path_cpu_ms_per_request",
        "CPU of client, operator and agent per forwarded request, ms",
        "",
    ),
    (
        "forwarding",
        "path_cpu_ms_per_direct_request",
        "the same per direct request (the operator idle), ms",
        "",
    ),
    ("forwarding", "api_writes_per_request", "API writes per forwarded request", "0"),
    (
        "forwarding",
        "status_writes_per_second",
        "the pool's status refreshed while forwarding, a second",
        "<= 1",
    ),
    ("forwarding", "requests_per_second", "forwarded requests/s, 32 at a time", ""),
    ("forwarding", "throughput_ratio", "forwarded requests/s / direct, 32 at a time", ""),
    (
        "mcp_sessions",
        "open_all_seconds",
        "100 MCP sessions at once through the gateway, pool of 10x10: all open, s (14)",
        "",
    ),
    ("mcp_sessions", "direct_open_all_seconds", "the same straight to the agents, s", ""),
    ("mcp_sessions", "initialize_p50_ms", "MCP initialize through the gateway, p50, ms", ""),
    ("mcp_sessions", "initialize_p99_ms", "MCP initialize through the gateway, p99, ms", ""),
    ("mcp_sessions", "direct_initialize_p50_ms", "the same straight to the agents, p50, ms", ""),
    ("mcp_sessions", "call_p50_ms", "tool call, 100 sessions at once, gateway, p50, ms", ""),
    ("mcp_sessions", "call_p99_ms", "tool call, 100 sessions at once, gateway, p99, ms", ""),
    ("mcp_sessions", "direct_call_p50_ms", "the same straight to the agents, p50, ms", ""),
    ("mcp_sessions", "direct_call_p99_ms", "the same straight to the agents, p99, ms", ""),
    ("mcp_sessions", "alone_call_p50_ms", "tool call, one session alone, gateway, p50, ms", ""),
    ("mcp_sessions", "direct_alone_call_p50_ms", "the same straight to an agent, p50, ms", ""),
    ("mcp_sessions", "most_sessions_on_an_agent", "most sessions held by one agent", "<= 10"),
    ("mcp_sessions", "failed_sessions", "sessions failed or not pinned", "0"),
]


def render(results: dict[str, Any]) -> str:
    host = results.get("machine") or {}
    lines = [
        "| figure | value | target |",
        "|---|---|---|",
    ]
    for section, key, label, target in ROWS:
        value = (results.get(section) or {}).get(key)
        shown = "not run" if value is None else f"{value:g}"
        lines.append(f"| {label} | {shown} | {target} |")
    lines += simulated_section(results.get("simulated") or {})
    lines += mcp_section(results.get("mcp_sessions") or {})
    lines += [
        "",
        f"Made by `{results.get('command', 'python -m bench')}` on {host.get('date')}: "
        f"{host.get('cpus')} CPUs ({host.get('cpu_model')}), {host.get('memory_gib')} GiB, "
        f"{host.get('system')}, Python {host.get('python')}, load average "
        f"{host.get('load_average')} when it started.",
    ]
    return "\n".join(lines) + "\n"


def mcp_section(found: dict[str, Any]) -> list[str]:
    """Scenario 14 in a few sentences, dated: what its table rows leave out."""
    if found.get("call_p50_ms") is None:
        return []
    spread = sorted({n for turn in found["sessions_per_agent_turns"] for n in turn})
    return [
        "",
        "## A hundred MCP sessions at once",
        "",
        f"`python -m bench --only mcp_sessions` on {found.get('date')}, a shared and noisy "
        f"machine of {found.get('cpus')} cores (load average {found.get('load_average')} as "
        f"it started): {found['sessions']} sessions of the `mcp` SDK's client at once, "
        f"{found['turns']} turns each way in turn, on a pool of {found['agents']} agents of "
        f"`examples/http/mcp_server.py` with {found['slots']} slots and sessions on "
        "`Mcp-Session-Id`. Each session: initialize, then once all are open "
        f"{found['notes_per_session']} `remember`, `recall` and `whoami`, then a DELETE.",
        "",
        "| figure | through the gateway | straight to the agents | ratio |",
        "|---|---|---|---|",
        f"| all sessions open, s (median of turns) | {found['open_all_seconds']} | "
        f"{found['direct_open_all_seconds']} | {found.get('open_all_ratio')} |",
        f"| initialize p50 / p99, ms | {found['initialize_p50_ms']} / "
        f"{found['initialize_p99_ms']} | {found['direct_initialize_p50_ms']} / "
        f"{found['direct_initialize_p99_ms']} | {found['initialize_p50_ratio']} / "
        f"{found['initialize_p99_ratio']} |",
        f"| tool call, all sessions calling at once, p50 / p99, ms | {found['call_p50_ms']} / "
        f"{found['call_p99_ms']} | {found['direct_call_p50_ms']} / "
        f"{found['direct_call_p99_ms']} | {found['call_p50_ratio']} / "
        f"{found['call_p99_ratio']} |",
        f"| tool call, one session alone ({found['alone_calls']} calls), p50 / p99, ms | "
        f"{found['alone_call_p50_ms']} / {found['alone_call_p99_ms']} | "
        f"{found['direct_alone_call_p50_ms']} / {found['direct_alone_call_p99_ms']} | "
        f"{found['alone_call_p50_ratio']} / {found['alone_call_p99_ratio']} |",
        f"| sessions failed (an error, or notes not all the session's own) | "
        f"{found['failed_sessions'] + found['alone_failed_sessions']} | "
        f"{found['direct_failed_sessions'] + found['direct_alone_failed_sessions']} | |",
        "",
        f"Sessions per agent: {', '.join(map(str, spread))} in every turn; the pool's status "
        f"showed {found['busy_slots_while_open']} busy slots while all were open, and every "
        f"agent free again (`available` {found['agents']}, `busySlots` 0) "
        f"{', '.join(f'{s} s' for s in found['free_again_seconds_turns'])} after the last "
        "client closed.",
    ]


SIZE_HEADER = [
    "| pools x agents | settle, s | CPU to settle, s: operator / cluster "
    "| settled operator, % of a core | RSS, MiB | warm checkout p99, ms "
    "| spec change -> plan, p50 / p99, ms | SIGKILL -> every busy agent known, s "
    "| SIGKILL -> every pool served, s | load |",
    "|---|---|---|---|---|---|---|---|---|---|",
]


def simulated_section(simulated: dict[str, Any]) -> list[str]:
    """The simulated scenario by size, as measured: one row a size reached, one a size that ran
    out of its budget; then the memory fit. Empty when the scenario did not run."""
    steps = simulated.get("steps") or []
    unreached = simulated.get("unreached") or []
    if not steps and not unreached:
        return []
    lines = ["", "## One operator at scale: the simulated cluster", "", *SIZE_HEADER]
    lines += [size_row(step, simulated.get("recovery_limit_seconds")) for step in steps]
    budget = simulated.get("step_budget_seconds")
    for size in unreached:
        lines.append(
            f"| {size['pools']:,} x {size['agents'] // max(1, size['pools']):,} "
            f"| not within {budget:g} s: {size['ready_agents']:,} of {size['agents']:,} "
            f"agents ready | | | {_shown(size.get('rss_mib'))} when stopped | | | | | |"
        )
    if simulated.get("rss_per_pool_kib") is not None:
        lines += [
            "",
            f"Memory, fitted over the sizes reached: {simulated['rss_base_mib']:g} MiB + "
            f"{simulated['rss_per_pool_kib']:g} KiB a pool + "
            f"{simulated['rss_per_agent_kib']:g} KiB an agent.",
        ]
    lines += [
        "",
        "![One operator against size](plots/simulated.png)",
        "",
        "What these figures say about where one operator stops, and what sharding would split: "
        "[simulated.md](simulated.md).",
    ]
    return lines


def size_row(step: dict[str, Any], limit: float | None) -> str:
    """One size's row of the simulated scenario's table."""
    recovered = step.get("recovery_seconds")
    known = f"{step.get('busy_known_again', 0):,} of {step.get('busy_at_kill', 0):,}"
    recovery = (
        f"{recovered:g} ({known})"
        if recovered is not None
        else f"not within {_shown(limit)} s ({known})"
    )
    idle = step.get("idle_operator_cpu_cores")
    cpu = _pair(step.get("settle_operator_cpu_seconds"), step.get("settle_cluster_cpu_seconds"))
    return (
        f"| {step['pools']:,} x {step['agents_per_pool']:,} | {_shown(step.get('settle_seconds'))} "
        f"| {cpu} "
        f"| {_shown(None if idle is None else round(idle * 100, 1))} "
        f"| {_shown(step.get('rss_mib'))} | <= {_shown(step.get('checkout_p99_ms'))} "
        f"| {_pair(step.get('plan_p50_ms'), step.get('plan_p99_ms'))} "
        f"| {recovery} | {_shown(step.get('all_pools_back_seconds'))} "
        f"| {step.get('load_average') or ''} |"
    )


def _shown(value: Any) -> str:
    return "" if value is None else f"{value:g}"


def _pair(first: Any, second: Any) -> str:
    return "" if first is None and second is None else f"{_shown(first)} / {_shown(second)}"
