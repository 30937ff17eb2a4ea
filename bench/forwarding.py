"""Scenario 13: requests forwarded by the gateway to a pool of plain HTTP servers, beside the
same requests sent straight to the same agents.

A pool (``protocol: HTTP``) of 8 agents of 4 slots each, each :mod:`bench.http_agent`, a web
server that knows nothing of agentpool, and a pool of 2 echo agents of the agent protocol for
the native call beside it. The HTTP pool hands out its agents FIFO, so streams at once go to
different agents as the direct ones do (LIFO, the default, would put four on one agent, whose
event loop then serves them all, and time that as the gateway's). Every request through the
gateway goes to ``/v1/namespaces/NS/agentpools/web/proxy/PATH`` with the kubeconfig's token, as
``client.call`` shows it.

The caller is aiohttp, for both sides: an HTTPS ``ClientSession`` that trusts the gateway's CA
(from the namespace's ``agentpool-gateway`` ConfigMap) and keeps its connections alive, and the
same session over plain HTTP straight to an agent's ``podIP:port``. One library on both sides
puts the difference between them in the gateway (its TLS included) rather than in two clients;
aiohttp reads an answer's body as it arrives, so the first event of a stream is timed when it
comes, and it is what a Python program calling a web service through the gateway would use.

1. **First byte of a streamed answer**: ``GET /stream`` (an event at once, then one every 0.2 s
   to 1.2 s), direct and through the gateway in blocks taken in turn, 4 streams at a time
   (a stream is mostly waiting), their events kept apart: the time to the first event and to
   the answer's end, from the request sent.
2. **Overhead per request**: a small ``POST /echo`` one at a time, direct, through the gateway,
   and ``client.call`` on the native pool, in blocks taken in turn; each kind's CPU per request
   (``/proc``) of the whole machine (``/proc/stat``: on a shared machine, other tenants' work
   too), and of the processes on the request's path: this one (the client), the operator and
   the agents of the pool called.
3. **API requests per request**: the API server's request counts around the forwarded
   requests, less the scenario's own, by verb: writes (reviews aside, and the pool's status
   refresh apart, a second), reviews (TokenReview and SubjectAccessReview, each kept for a while
   by the gateway), reads; and the same over a time with no request at all, the operator's own
   rhythm.
4. **Throughput**: 32 at a time for a fixed time, direct and through the gateway, twice each in
   turn (medians).
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from agentpool.api.gateway import AGENT_HEADER, CA_KEY, CONFIGMAP, URL_KEY
from agentpool.client import Client
from agentpool.local.kubeconfig import ApiAccess
from bench.gateway import Counted
from bench.harness import (
    READS,
    ROOT,
    WRITES,
    Kube,
    Stage,
    percentile,
    pool_spec,
    until,
    wait_pool_ready,
)
from bench.http_agent import EVENTS, EVERY

AGENT = ROOT / "bench" / "http_agent.py"
NATIVE_AGENT = ROOT / "bench" / "echo_agent.py"
AGENTS, SLOTS, NATIVE_AGENTS, CONCURRENCY = 8, 4, 2, 32
#: Requests of each kind one at a time are taken in this many blocks, in turn.
BLOCKS = 5
#: Streams read at once, a stream being mostly a wait for its next event. Each lane starts a
#: quarter of the events' period after the one before, so a stream's first event never falls on
#: another lane's next one, which would time the gateway relaying that event too.
STREAM_LANES = 4
STREAM_SECONDS = EVERY * (EVENTS - 1)
#: The write that refreshes the pool's status (its busy and idle counts), at most once per the
#: operator's status interval while they change.
STATUS_REFRESH = "patch agentpools/status"
#: The API server's reviews, which the gateway asks for and keeps for a while.
REVIEWS = frozenset({"tokenreviews", "subjectaccessreviews"})
BODY = json.dumps({"input": "a small request", "n": 1}).encode()


def _ms(values: list[float], q: float) -> float:
    return round(percentile(values, q), 3)


def _pids(marker: str) -> list[int]:
    """The processes whose command line holds ``marker``: a pool's agents, by their program."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            command = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in command:
            found.append(int(proc.name))
    return found


def _cpu_seconds(pids: list[int]) -> float:
    """User and system CPU time these processes have used so far (those gone count nothing)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


class Spent:
    """:class:`~bench.gateway.Counted` over the phases of one kind of request, and the CPU of
    the agents that served them."""

    def __init__(self, stage: Stage, agents: list[int]) -> None:
        self.counted = Counted(stage)
        self.agents = agents
        self.agent_cpu_seconds = 0.0

    async def measure(self, requests: int, work: Awaitable[Any]) -> Any:
        before = _cpu_seconds(self.agents)
        result = await self.counted.measure(requests, work)
        self.agent_cpu_seconds += _cpu_seconds(self.agents) - before
        return result

    def cpu_ms(self, whose: str) -> float:
        """CPU per request, ms: the ``machine``'s, the ``operator``'s, the ``client``'s, or the
        ``path``'s (client, operator and agents)."""
        counted = self.counted
        seconds = {
            "machine": counted.machine_cpu_seconds,
            "operator": counted.cpu_seconds,
            "client": counted.client_cpu_seconds,
            "path": counted.client_cpu_seconds + counted.cpu_seconds + self.agent_cpu_seconds,
        }[whose]
        return counted.cpu_ms_per_call(seconds)


class Caller:
    """One aiohttp session, kept-alive, to the agents over HTTP and to the gateway over HTTPS."""

    def __init__(self, *, gateway: str, ca_pem: str, token: str, endpoints: list[str]) -> None:
        context = ssl.create_default_context(cadata=ca_pem)
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=4 * CONCURRENCY, ssl=context),
            trust_env=False,
        )
        self.gateway = gateway
        self.endpoints = endpoints
        self.auth = {"Authorization": f"Bearer {token}"}
        #: The agents the gateway named as serving the streams it forwarded.
        self.streamed_by: Counter[str] = Counter()

    async def close(self) -> None:
        await self.session.close()

    def direct(self, n: int, path: str) -> tuple[str, dict[str, str]]:
        return self.endpoints[n % len(self.endpoints)] + path, {}

    def proxied(self, _n: int, path: str) -> tuple[str, dict[str, str]]:
        return self.gateway + path, self.auth

    async def echo(self, url: str, headers: dict[str, str]) -> None:
        headers = {**headers, "Content-Type": "application/json"}
        async with self.session.post(url, data=BODY, headers=headers) as response:
            body = await response.read()
            if response.status != 200:
                raise RuntimeError(f"POST {url}: {response.status} {body[:300]!r}")

    async def stream(self, url: str, headers: dict[str, str]) -> tuple[float, float]:
        """(to the first event, to the answer's end), ms, from the request sent."""
        started = time.perf_counter()
        async with self.session.get(url, headers=headers) as response:
            first = await response.content.readany()
            first_at = time.perf_counter()
            body = first
            while piece := await response.content.readany():
                body += piece
            ended_at = time.perf_counter()
            if response.status != 200 or not first.startswith(b"data: "):
                raise RuntimeError(f"GET {url}: {response.status} {body[:300]!r}")
            if body.count(b"data: ") != EVENTS:
                raise RuntimeError(f"GET {url}: {body.count(b'data: ')} events of {EVENTS}")
            if headers:
                self.streamed_by[response.headers.get(AGENT_HEADER, "")] += 1
        return (first_at - started) * 1000, (ended_at - started) * 1000


async def _gateway(kube: Kube, namespace: str) -> tuple[str, str]:
    """The gateway's URL and CA, as the namespace's ConfigMap publishes them."""
    url = f"{kube.server}/api/v1/namespaces/{namespace}/configmaps/{CONFIGMAP}"

    async def published() -> dict[str, str] | None:
        kube.own["get"] += 1
        async with kube.session.get(url) as response:
            if response.status == 404:
                return None
            response.raise_for_status()
            data: dict[str, str] = (await response.json()).get("data") or {}
            return data if data.get(URL_KEY) else None

    data = await until(published, timeout=60, what="the gateway's ConfigMap", interval=0.1)
    return data[URL_KEY], data[CA_KEY]


async def _timed(count: int, one: Callable[[int], Awaitable[Any]]) -> list[float]:
    latencies = []
    for n in range(count):
        started = time.perf_counter()
        await one(n)
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


async def _streams(
    count: int, one: Callable[[int], Awaitable[tuple[float, float]]]
) -> list[tuple[float, float]]:
    """``count`` streams over :data:`STREAM_LANES` lanes, each lane one stream after another."""
    found: list[tuple[float, float]] = []

    async def lane(index: int) -> None:
        await asyncio.sleep((index + 0.5) * EVERY / STREAM_LANES)
        for n in range(index, count, STREAM_LANES):
            found.append(await one(n))

    await asyncio.gather(*(lane(index) for index in range(min(count, STREAM_LANES))))
    return found


async def _throughput(seconds: float, one: Callable[[int], Awaitable[Any]]) -> int:
    """Requests done by :data:`CONCURRENCY` workers, each sending in a loop, for ``seconds``."""
    deadline = time.monotonic() + seconds
    done = 0

    async def worker(index: int) -> None:
        nonlocal done
        n = index
        while time.monotonic() < deadline:
            await one(n)
            n += CONCURRENCY
            done += 1

    await asyncio.gather(*(worker(index) for index in range(CONCURRENCY)))
    return done


async def run(work: Path, *, requests: int, streams: int, seconds: float) -> dict[str, Any]:
    """Scenario 13; the figures for results.json and the samples for the plots."""
    async with Stage(work, "forwarding") as stage:
        kube = stage.kube
        namespace = await kube.new_namespace("bench")
        web = pool_spec(
            AGENT, minSize=AGENTS, maxSize=AGENTS, slots=SLOTS, protocol="HTTP", strategy="FIFO"
        )
        web["template"]["spec"]["containers"][0]["command"] = ["python", str(AGENT)]
        web["readinessProbe"] = {"httpGet": {"path": "/health"}}
        await kube.create("agentpools", namespace, "web", web)
        native = pool_spec(NATIVE_AGENT, minSize=NATIVE_AGENTS, maxSize=NATIVE_AGENTS)
        await kube.create("agentpools", namespace, "native", native)
        endpoints = await wait_pool_ready(kube, namespace, "web", AGENTS, timeout=90)
        await wait_pool_ready(kube, namespace, "native", NATIVE_AGENTS, timeout=90)
        url, ca_pem = await _gateway(kube, namespace)
        access = ApiAccess.from_kubeconfig(stage.kubeconfig_path)
        token = access.headers()["Authorization"].removeprefix("Bearer ")
        caller = Caller(
            gateway=f"{url}/v1/namespaces/{namespace}/agentpools/web/proxy",
            ca_pem=ca_pem,
            token=token,
            endpoints=endpoints,
        )
        try:
            async with Client.from_kubeconfig(stage.kubeconfig_path, namespace=namespace) as client:
                return await _measure(
                    stage, caller, client, requests=requests, streams=streams, seconds=seconds
                )
        finally:
            await caller.close()


async def _measure(
    stage: Stage,
    caller: Caller,
    client: Client,
    *,
    requests: int,
    streams: int,
    seconds: float,
) -> dict[str, Any]:
    routes = {"direct": caller.direct, "proxy": caller.proxied}

    def echo(kind: str) -> Callable[[int], Awaitable[None]]:
        return lambda n: caller.echo(*routes[kind](n, "/echo"))

    def stream(kind: str) -> Callable[[int], Awaitable[tuple[float, float]]]:
        return lambda n: caller.stream(*routes[kind](n, "/stream"))

    async def call(n: int) -> Any:
        return await client.call("native", {"n": n})

    kinds: dict[str, Callable[[int], Awaitable[Any]]] = {
        "direct": echo("direct"),
        "proxy": echo("proxy"),
        "call": call,
    }
    web, native = _pids(str(AGENT)), _pids(str(NATIVE_AGENT))
    # Connections opened, the caller's token reviewed, code paths warm.
    warm = min(50, requests)
    for one in kinds.values():
        await _timed(warm, one)
    await _streams(STREAM_LANES, stream("direct"))
    await _streams(STREAM_LANES, stream("proxy"))

    # The operator's own requests and CPU with no request at all, for as long as one turn at 32.
    idle = Spent(stage, web)
    await idle.measure(0, asyncio.sleep(seconds))

    spent = {
        "direct": Spent(stage, web),
        "proxy": Spent(stage, web),
        "call": Spent(stage, native),
        "stream_direct": Spent(stage, web),
        "stream_proxy": Spent(stage, web),
    }
    samples: dict[str, list[float]] = {kind: [] for kind in kinds}
    timings: dict[str, list[tuple[float, float]]] = {"direct": [], "proxy": []}
    block = max(1, requests // BLOCKS)
    per_block = max(1, streams // BLOCKS)
    for _ in range(BLOCKS):
        for kind, one in kinds.items():
            samples[kind] += await spent[kind].measure(block, _timed(block, one))
        for kind in timings:
            timings[kind] += await spent["stream_" + kind].measure(
                per_block, _streams(per_block, stream(kind))
            )

    rates: dict[str, list[float]] = {"direct": [], "proxy": []}
    busy = {kind: Spent(stage, web) for kind in rates}
    for _ in range(2):
        for kind in rates:
            done = await busy[kind].measure(0, _throughput(seconds, kinds[kind]))
            busy[kind].counted.calls += done
            rates[kind].append(done / seconds)
    direct_rate, proxy_rate = statistics.median(rates["direct"]), statistics.median(rates["proxy"])

    first = {kind: [t[0] for t in found] for kind, found in timings.items()}
    last = {kind: [t[1] for t in found] for kind, found in timings.items()}
    forwarded = [spent["proxy"], spent["stream_proxy"], busy["proxy"]]
    figures = {
        "agents": AGENTS,
        "slots": SLOTS,
        "concurrency": CONCURRENCY,
        "requests": block * BLOCKS,
        "streams": per_block * BLOCKS,
        "stream_lanes": STREAM_LANES,
        "stream_events": EVENTS,
        "stream_seconds": round(STREAM_SECONDS, 3),
        "stream_agents": len(caller.streamed_by),
        "direct_first_byte_p50_ms": _ms(first["direct"], 50),
        "direct_first_byte_p99_ms": _ms(first["direct"], 99),
        "first_byte_p50_ms": _ms(first["proxy"], 50),
        "first_byte_p99_ms": _ms(first["proxy"], 99),
        "first_byte_overhead_p50_ms": round(_ms(first["proxy"], 50) - _ms(first["direct"], 50), 3),
        "first_byte_overhead_p99_ms": round(_ms(first["proxy"], 99) - _ms(first["direct"], 99), 3),
        "direct_last_byte_p50_ms": _ms(last["direct"], 50),
        "direct_last_byte_p99_ms": _ms(last["direct"], 99),
        "last_byte_p50_ms": _ms(last["proxy"], 50),
        "last_byte_p99_ms": _ms(last["proxy"], 99),
        "last_byte_overhead_p50_ms": round(_ms(last["proxy"], 50) - _ms(last["direct"], 50), 3),
        "last_byte_overhead_p99_ms": round(_ms(last["proxy"], 99) - _ms(last["direct"], 99), 3),
        "direct_p50_ms": _ms(samples["direct"], 50),
        "direct_p99_ms": _ms(samples["direct"], 99),
        "proxy_p50_ms": _ms(samples["proxy"], 50),
        "proxy_p99_ms": _ms(samples["proxy"], 99),
        "call_p50_ms": _ms(samples["call"], 50),
        "call_p99_ms": _ms(samples["call"], 99),
        "overhead_p50_ms": round(_ms(samples["proxy"], 50) - _ms(samples["direct"], 50), 3),
        "overhead_p99_ms": round(_ms(samples["proxy"], 99) - _ms(samples["direct"], 99), 3),
        "proxy_over_call_p50_ms": round(_ms(samples["proxy"], 50) - _ms(samples["call"], 50), 3),
        "proxy_over_call_p99_ms": round(_ms(samples["proxy"], 99) - _ms(samples["call"], 99), 3),
        **{
            f"{whose}_cpu_ms_per_{what}": spent[kind].cpu_ms(whose)
            for whose in ("machine", "path", "operator", "client")
            for kind, what in (("direct", "direct_request"), ("proxy", "request"), ("call", "call"))
        },
        **_api(forwarded, idle),
        "direct_requests_per_second": round(direct_rate, 1),
        "requests_per_second": round(proxy_rate, 1),
        "throughput_ratio": round(proxy_rate / direct_rate, 3),
        "requests_per_second_turns": [round(r, 1) for r in rates["proxy"]],
        "direct_requests_per_second_turns": [round(r, 1) for r in rates["direct"]],
        **{
            f"{whose}_cpu_ms_per_{what}_at_32": busy[kind].cpu_ms(whose)
            for whose in ("machine", "path", "operator")
            for kind, what in (("direct", "direct_request"), ("proxy", "request"))
        },
        "throughput_seconds": seconds,
    }
    return {
        "forwarding": figures,
        "_samples": {
            "forwarding_direct_ms": samples["direct"],
            "forwarding_proxy_ms": samples["proxy"],
            "forwarding_call_ms": samples["call"],
            "forwarding_direct_first_byte_ms": first["direct"],
            "forwarding_first_byte_ms": first["proxy"],
        },
    }


def _kinds(served: Counter[tuple[str, str]]) -> tuple[dict[str, int], int, int]:
    """(writes by request, reviews, reads) of what the API server served."""
    writes = {
        f"{verb} {resource}": count
        for (verb, resource), count in sorted(served.items())
        if verb in WRITES and resource not in REVIEWS
    }
    reviews = sum(count for (_verb, resource), count in served.items() if resource in REVIEWS)
    reads = sum(count for (verb, _resource), count in served.items() if verb in READS)
    return writes, reviews, reads


def _api(phases: list[Spent], idle: Spent) -> dict[str, Any]:
    """The API server's requests per forwarded request over ``phases``, by kind, and per second
    there and with no request at all (``idle``)."""
    requests = sum(phase.counted.calls for phase in phases)
    seconds = sum(phase.counted.seconds for phase in phases)
    served = sum((phase.counted.served for phase in phases), start=Counter[tuple[str, str]]())
    writes, reviews, reads = _kinds(served)
    idle_writes, idle_reviews, idle_reads = _kinds(idle.counted.served)
    per = max(1, requests)
    quiet = max(idle.counted.seconds, 1e-9)
    # The pool's status is refreshed while its counts change, once a status interval at most,
    # whatever the request rate: counted apart from the writes a request itself would cost.
    refreshes = writes.pop(STATUS_REFRESH, 0)
    return {
        "forwarded_requests": requests,
        "forwarding_seconds": round(seconds, 1),
        "api_writes_per_request": round(sum(writes.values()) / per, 4),
        "api_writes_by_request": writes,
        "status_writes_per_second": round(refreshes / max(seconds, 1e-9), 3),
        "api_reviews_per_request": round(reviews / per, 4),
        "api_reads_per_request": round(reads / per, 4),
        "api_writes_per_second": round((sum(writes.values()) + refreshes) / max(seconds, 1e-9), 3),
        "api_reads_per_second": round(reads / max(seconds, 1e-9), 3),
        "idle_seconds": round(idle.counted.seconds, 1),
        "idle_api_writes_per_second": round(sum(idle_writes.values()) / quiet, 3),
        "idle_api_reads_per_second": round((idle_reads + idle_reviews) / quiet, 3),
        "idle_api_writes_by_request": idle_writes,
    }
