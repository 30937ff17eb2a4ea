"""Scenario 14: a hundred MCP sessions at once through the gateway, over a pool of ten.

A pool (``protocol: HTTP``) of 10 agents of 10 slots each, each the MCP server of
``examples/http/mcp_server.py`` (the official ``mcp`` SDK, streamable HTTP at ``/mcp``) as
``examples/http/mcp-pool.yaml`` runs it, with sessions on ``Mcp-Session-Id``: the answer that
begins a session pins it to its agent, holding one slot, until the client's DELETE. So 100
sessions fit, 10 on each agent.

Each turn opens 100 sessions at once, each with the SDK's own client
(``streamable_http_client`` over an ``httpx2.AsyncClient`` of its own, as
``tests/integration/test_http_sessions.py`` does): every session initializes, then, once all are
open, calls ``remember`` a few times, ``recall`` and ``whoami``, then closes (a DELETE). A
session's notes live in the server process that began it, so ``recall`` answering exactly the
session's own notes shows every request of it reached that process: the session was pinned. The
baseline, in the same run and in turns with the gateway's, is the same sessions straight to the
agents' ``podIP:port/mcp`` over plain HTTP, round-robin, 10 to an agent.

Measured: the time until all sessions are open and ``initialize`` p50/p99, each tool call's
latency p50/p99 (100 sessions calling at once), the sessions each agent served (``whoami``),
the sessions that failed (an error, or notes not all the session's own), the pool's status while
all are open (``busySlots``) and the time until it shows every agent free again after the
clients close (``available`` all, ``busySlots`` 0). Then one session alone each way, its
``remember`` calls one at a time in blocks taken in turn: a tool call's latency with nothing
else on the machine, beside the one of 100 sessions calling at once, which is mostly this
process's own work for 100 clients on a shared machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import mcp.types
import yaml
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from agentpool.local.kubeconfig import ApiAccess
from bench import machine
from bench.forwarding import _gateway
from bench.harness import ROOT, Kube, Stage, percentile, until, wait_pool_ready

MANIFEST = ROOT / "examples" / "http" / "mcp-pool.yaml"
POOL = "notes"
SLOTS = 10
#: How long one session may take from its start to its close, and one turn in all.
SESSION_SECONDS, TURN_SECONDS = 120.0, 240.0
#: How long the pool's status may take to show the sessions held, and its agents free again.
STATUS_SECONDS = 30.0
#: One session alone each way is timed in this many blocks, taken in turn.
BLOCKS = 5


def _ms(values: list[float], q: float) -> float | None:
    return round(percentile(values, q), 3) if values else None


def _result(result: mcp.types.CallToolResult) -> Any:
    if result.is_error:
        raise RuntimeError(f"tool error: {result.content!r}"[:300])
    return (result.structured_content or {})["result"]


@dataclass
class Turn:
    """One turn of ``sessions`` at once, by one route (``gateway`` or ``direct``)."""

    route: str
    sessions: int
    initialize_ms: list[float] = field(default_factory=list)
    call_ms: list[float] = field(default_factory=list)
    servers: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    opened: int = 0
    called: int = 0
    ended: int = 0
    open_seconds: float = 0.0
    calls_seconds: float = 0.0
    close_seconds: float = 0.0
    held: dict[str, Any] = field(default_factory=dict)
    free_seconds: float | None = None
    #: (seconds since the last client closed, available, busySlots) at each change seen.
    free_trace: list[tuple[float, Any, Any]] = field(default_factory=list)


class Route:
    """How a session reaches the MCP servers: through the gateway's proxy path, or straight."""

    def __init__(
        self, name: str, urls: list[str], *, context: ssl.SSLContext | None, token: str = ""
    ) -> None:
        self.name = name
        self.urls = urls
        self.context = context
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def url(self, n: int) -> str:
        return self.urls[n % len(self.urls)]

    def client(self) -> httpx2.AsyncClient:
        # Plain HTTP straight to the agents: no CA bundle to load for each client.
        verify: ssl.SSLContext | bool = self.context if self.context is not None else False
        return httpx2.AsyncClient(verify=verify, headers=self.headers, timeout=60)


async def _session(
    route: Route, n: int, turn: Turn, notes: int, go: asyncio.Event, close: asyncio.Event
) -> None:
    """One MCP session of ``turn``: open, wait for ``go``, call, wait for ``close``, end."""
    mine = [f"s{n}-note{k}" for k in range(notes)]
    step = "open"
    try:
        async with asyncio.timeout(SESSION_SECONDS):
            async with (
                route.client() as http,
                streamable_http_client(route.url(n), http_client=http) as streams,
                ClientSession(streams[0], streams[1]) as session,
            ):
                started = time.perf_counter()
                await session.initialize()
                turn.initialize_ms.append((time.perf_counter() - started) * 1000)
                turn.opened += 1
                await go.wait()
                step = "calls"
                for k, note in enumerate(mine):
                    started = time.perf_counter()
                    held = _result(await session.call_tool("remember", {"note": note}))
                    turn.call_ms.append((time.perf_counter() - started) * 1000)
                    if held != k + 1:
                        raise RuntimeError(f"remember: the session holds {held} notes, not {k + 1}")
                started = time.perf_counter()
                recalled = _result(await session.call_tool("recall", {}))
                turn.call_ms.append((time.perf_counter() - started) * 1000)
                server = _result(await session.call_tool("whoami", {}))
                if recalled != mine:
                    raise RuntimeError(f"recall: {recalled!r}, not the session's own {mine!r}")
                turn.servers[str(server)] += 1
                turn.called += 1
                await close.wait()
                step = "close"
        turn.ended += 1
    except Exception as error:  # a failed session is a figure, not a crash
        turn.failures.append(f"session {n} at {step}: {_text(error)}"[:400])


def _text(error: BaseException) -> str:
    """What went wrong, the innermost errors of a group (the mcp client's task groups) named."""
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(_text(inner) for inner in error.exceptions)
    return f"{type(error).__name__}: {error}"


async def _status(kube: Kube, namespace: str) -> dict[str, Any]:
    status: dict[str, Any] = (await kube.get("agentpools", namespace, POOL)).get("status") or {}
    return status


async def _turn(
    route: Route,
    sessions: int,
    notes: int,
    *,
    kube: Kube,
    namespace: str,
    agents: int,
) -> Turn:
    """``sessions`` sessions at once by ``route``; the pool's status watched for the gateway's."""
    turn = Turn(route.name, sessions)
    go, close = asyncio.Event(), asyncio.Event()
    started = time.perf_counter()
    tasks = [
        asyncio.create_task(_session(route, n, turn, notes, go, close)) for n in range(sessions)
    ]
    try:
        async with asyncio.timeout(TURN_SECONDS):

            async def all_open() -> bool:
                return turn.opened + len(turn.failures) >= sessions

            await until(all_open, timeout=TURN_SECONDS, what="all sessions open")
            turn.open_seconds = time.perf_counter() - started
            if route.name == "gateway":
                # Every open session holds a slot of its agent, which the pool's status shows.
                async def held() -> dict[str, Any]:
                    status = await _status(kube, namespace)
                    return status if status.get("busySlots") == turn.opened else {}

                with contextlib.suppress(TimeoutError):
                    await until(
                        held, timeout=STATUS_SECONDS, what="the sessions held", interval=0.2
                    )
                status = await _status(kube, namespace)
                turn.held = {k: status.get(k) for k in ("available", "busy", "busySlots", "slots")}
            called_at = time.perf_counter()
            go.set()

            async def all_called() -> bool:
                return turn.called + len(turn.failures) >= sessions

            await until(all_called, timeout=TURN_SECONDS, what="all sessions' calls")
            turn.calls_seconds = time.perf_counter() - called_at
            closed_at = time.perf_counter()
            close.set()
            await asyncio.gather(*tasks)
            turn.close_seconds = time.perf_counter() - closed_at
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    if route.name == "gateway":
        freed_at = time.perf_counter()

        async def free() -> bool:
            status = await _status(kube, namespace)
            seen = (status.get("available"), status.get("busySlots"))
            if not turn.free_trace or turn.free_trace[-1][1:] != seen:
                turn.free_trace.append((round(time.perf_counter() - freed_at, 2), *seen))
            return seen == (agents, 0)

        with contextlib.suppress(TimeoutError):
            await until(free, timeout=STATUS_SECONDS, what="every agent free", interval=0.2)
            turn.free_seconds = round(time.perf_counter() - freed_at, 2)
    return turn


async def _alone(route: Route, calls: int, latencies: list[float], failures: list[str]) -> None:
    """One session by ``route`` alone: ``calls`` calls of ``remember`` one after another, their
    latencies added to ``latencies``; a failed session's error added to ``failures``."""
    k = -1
    try:
        async with (
            asyncio.timeout(SESSION_SECONDS),
            route.client() as http,
            streamable_http_client(route.url(0), http_client=http) as streams,
            ClientSession(streams[0], streams[1]) as session,
        ):
            await session.initialize()
            for k in range(calls):
                started = time.perf_counter()
                held = _result(await session.call_tool("remember", {"note": f"alone-{k}"}))
                latencies.append((time.perf_counter() - started) * 1000)
                if held != k + 1:
                    raise RuntimeError(f"the session holds {held} notes, not {k + 1}")
    except Exception as error:  # a failed session is a figure, not a crash
        failures.append(f"a session alone {route.name}, call {k + 1}: {_text(error)}"[:400])


def _pool(agents: int) -> dict[str, Any]:
    """The example's pool, ``agents`` of :data:`SLOTS` slots, all started at once."""
    spec: dict[str, Any] = yaml.safe_load(MANIFEST.read_text())["spec"]
    spec.update(minSize=agents, maxSize=agents, slots=SLOTS, maxUnready=agents)
    return spec


async def run(
    work: Path, *, sessions: int, agents: int, notes: int, turns: int, alone: int
) -> dict[str, Any]:
    """Scenario 14; the figures for results.json and the samples for the plots."""
    # A run of some scenarios keeps the others' figures: this one says when and where it ran.
    host = machine.describe()
    async with Stage(work, "mcp_sessions") as stage:
        kube = stage.kube
        namespace = await kube.new_namespace("bench")
        await kube.create("agentpools", namespace, POOL, _pool(agents))
        endpoints = await wait_pool_ready(kube, namespace, POOL, agents, timeout=120)

        async def available() -> bool:
            return (await _status(kube, namespace)).get("available") == agents

        await until(available, timeout=60, what="every agent available", interval=0.2)
        url, ca_pem = await _gateway(kube, namespace)
        token = ApiAccess.from_kubeconfig(stage.kubeconfig_path).headers()["Authorization"]
        routes = {
            "gateway": Route(
                "gateway",
                [f"{url}/v1/namespaces/{namespace}/agentpools/{POOL}/proxy/mcp"],
                context=ssl.create_default_context(cadata=ca_pem),
                token=token.removeprefix("Bearer "),
            ),
            "direct": Route("direct", [f"{e}/mcp" for e in endpoints], context=None),
        }
        # The caller's token reviewed, the servers' code paths warm: one session each way.
        for route in routes.values():
            warm = await _turn(route, 1, 1, kube=kube, namespace=namespace, agents=agents)
            if warm.failures:
                raise RuntimeError(f"a first session {route.name}: {warm.failures[0]}")
        done: dict[str, list[Turn]] = {name: [] for name in routes}
        for _ in range(turns):
            for name, route in routes.items():
                turn = await _turn(
                    route, sessions, notes, kube=kube, namespace=namespace, agents=agents
                )
                done[name].append(turn)
                print(
                    f"   {name}: {turn.opened} open in {turn.open_seconds:.2f} s, "
                    f"{len(turn.failures)} failed, agents {sorted(turn.servers.values())}",
                    flush=True,
                )
        # The latency of a tool call with nothing else on the machine: one session each way,
        # its calls one at a time, in blocks taken in turn.
        single: dict[str, list[float]] = {name: [] for name in routes}
        lone_failures: dict[str, list[str]] = {name: [] for name in routes}
        for _ in range(BLOCKS):
            for name, route in routes.items():
                await _alone(route, max(1, alone // BLOCKS), single[name], lone_failures[name])
        found = _figures(done, single, lone_failures, sessions=sessions, agents=agents, notes=notes)
        found["mcp_sessions"] |= {
            "date": host["date"],
            "cpus": host["cpus"],
            "load_average": host["load_average"],
        }
        return found


def _figures(
    done: dict[str, list[Turn]],
    single: dict[str, list[float]],
    lone_failures: dict[str, list[str]],
    *,
    sessions: int,
    agents: int,
    notes: int,
) -> dict[str, Any]:
    def pooled(name: str, what: str) -> list[float]:
        return [v for turn in done[name] for v in getattr(turn, what)]

    def median(name: str, what: str) -> float:
        return round(statistics.median(getattr(turn, what) for turn in done[name]), 3)

    gateway, direct = done["gateway"], done["direct"]
    figures: dict[str, Any] = {
        "agents": agents,
        "slots": SLOTS,
        "sessions": sessions,
        "turns": len(gateway),
        "notes_per_session": notes,
        "calls_per_session": notes + 1,
    }
    for name in done:
        prefix = "" if name == "gateway" else "direct_"
        init, calls = pooled(name, "initialize_ms"), pooled(name, "call_ms")
        figures |= {
            f"{prefix}open_all_seconds": median(name, "open_seconds"),
            f"{prefix}open_all_seconds_turns": [round(t.open_seconds, 3) for t in done[name]],
            f"{prefix}initialize_p50_ms": _ms(init, 50),
            f"{prefix}initialize_p99_ms": _ms(init, 99),
            f"{prefix}call_p50_ms": _ms(calls, 50),
            f"{prefix}call_p99_ms": _ms(calls, 99),
            f"{prefix}calls_seconds": median(name, "calls_seconds"),
            f"{prefix}close_all_seconds": median(name, "close_seconds"),
            f"{prefix}failed_sessions": sum(len(t.failures) for t in done[name]),
        }
    spread = [sorted(t.servers.values()) for t in gateway]
    figures |= {
        "failures": [
            *(f for turn in [*gateway, *direct] for f in turn.failures),
            *(f for found in lone_failures.values() for f in found),
        ][:10],
        "sessions_per_agent_turns": spread,
        "agents_used": min((len(s) for s in spread), default=0),
        "most_sessions_on_an_agent": max((max(s) for s in spread if s), default=0),
        "fewest_sessions_on_an_agent": min((min(s) for s in spread if s), default=0),
        "held_while_open_turns": [t.held for t in gateway],
        "busy_slots_while_open": min((t.held.get("busySlots") or 0 for t in gateway), default=0),
        "free_again_seconds_turns": [t.free_seconds for t in gateway],
        "free_again_trace_turns": [t.free_trace for t in gateway],
        "alone_calls": len(single["gateway"]),
        "alone_sessions": BLOCKS,
        "alone_failed_sessions": len(lone_failures["gateway"]),
        "direct_alone_failed_sessions": len(lone_failures["direct"]),
        "alone_call_p50_ms": _ms(single["gateway"], 50),
        "alone_call_p99_ms": _ms(single["gateway"], 99),
        "direct_alone_call_p50_ms": _ms(single["direct"], 50),
        "direct_alone_call_p99_ms": _ms(single["direct"], 99),
        "all_free_again": all(t.free_seconds is not None for t in gateway),
    }
    for what in (
        "initialize_p50_ms",
        "initialize_p99_ms",
        "call_p50_ms",
        "call_p99_ms",
        "alone_call_p50_ms",
        "alone_call_p99_ms",
    ):
        over, base = figures[what], figures[f"direct_{what}"]
        figures[f"{what.removesuffix('_ms')}_ratio"] = (
            round(over / base, 3) if over is not None and base else None
        )
    if figures["direct_open_all_seconds"]:
        figures["open_all_ratio"] = round(
            figures["open_all_seconds"] / figures["direct_open_all_seconds"], 3
        )
    return {
        "mcp_sessions": figures,
        "_samples": {
            "mcp_initialize_ms": pooled("gateway", "initialize_ms"),
            "mcp_direct_initialize_ms": pooled("direct", "initialize_ms"),
            "mcp_call_ms": pooled("gateway", "call_ms"),
            "mcp_direct_call_ms": pooled("direct", "call_ms"),
            "mcp_alone_call_ms": single["gateway"],
            "mcp_direct_alone_call_ms": single["direct"],
        },
    }
