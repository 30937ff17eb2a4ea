"""Scenario 7: what the Python client costs, beside a direct call to a warm agent.

A pool of 4 echo agents, all Ready. ``client.lease`` is timed from its call until the agent is
usable (the lease created, Bound, its token read: with per-lease tokens, the bind to the agent
included), and its release from leaving the block until the API server reports the lease gone
(its agent back in the pool); then ``client.call`` (through the operator's gateway) one item at
a time; then a direct ``POST /invoke`` to a warm agent with the pool's token on a kept
connection, the floor any call through a pool stands on.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from agentpool.client import Client
from agentpool.client.agents import AgentCaller
from agentpool.wire.envelopes import envelope_body
from bench.harness import ROOT, Stage, Watcher, percentile, pool_spec, wait_pool_ready

AGENT = ROOT / "bench" / "echo_agent.py"
AGENTS = 4


async def _leases(client: Client, watcher: Watcher, count: int) -> tuple[list[float], list[float]]:
    """(bind ms, release ms) of ``count`` leases, one at a time."""
    binds, releases = [], []
    for _ in range(count):
        started = time.monotonic()
        async with client.lease("echo", ttl=60) as agent:
            binds.append((time.monotonic() - started) * 1000)
            await agent.invoke("warm")
            name = agent.lease
            left = time.monotonic()
        at, _ = await watcher.wait(
            lambda seen, _obj, name=name: seen == name,
            timeout=30,
            what=f"lease {name} gone",
            since=left,
            event="DELETED",
        )
        releases.append((at - left) * 1000)
    return binds, releases


async def _calls(client: Client, count: int) -> list[float]:
    latencies = []
    for n in range(count):
        started = time.monotonic()
        await client.call("echo", {"n": n})
        latencies.append((time.monotonic() - started) * 1000)
    return latencies


async def _direct(endpoint: str, token: str, count: int) -> list[float]:
    caller = AgentCaller()
    latencies = []
    try:
        for n in range(count):
            envelope = envelope_body(id=n, item={"n": n}, input=None, attempt=1, run=None)
            started = time.monotonic()
            await caller.invoke(endpoint, token, envelope, timeout=30)
            latencies.append((time.monotonic() - started) * 1000)
    finally:
        caller.close()
    return latencies


def _ms(values: list[float], q: float) -> float:
    return round(percentile(values, q), 2)


async def run(work: Path, *, calls: int) -> dict[str, Any]:
    """Scenario 7; the figures for results.json and the samples for the plots."""
    async with Stage(work, "client") as stage:
        kube = stage.kube
        namespace = await kube.new_namespace("bench")
        spec = pool_spec(AGENT, minSize=AGENTS, maxSize=AGENTS)
        await kube.create("agentpools", namespace, "echo", spec)
        endpoints = await wait_pool_ready(kube, namespace, "echo", AGENTS, timeout=60)
        token = await kube.token(namespace, "echo")
        watcher = Watcher(kube, f"/apis/agentpool.dev/v1alpha1/namespaces/{namespace}/agentleases")
        await watcher.start()
        try:
            async with Client.from_kubeconfig(
                stage.cluster.kubeconfig, namespace=namespace
            ) as client:
                await _calls(client, 3)  # connections opened, code paths warm
                binds, releases = await _leases(client, watcher, calls)
                call_ms = await _calls(client, calls)
            direct_ms = await _direct(endpoints[0], token, calls)
        finally:
            await watcher.stop()
    return {
        "client": {
            "calls": calls,
            "call_p50_ms": _ms(call_ms, 50),
            "call_p99_ms": _ms(call_ms, 99),
            "direct_p50_ms": _ms(direct_ms, 50),
            "direct_p99_ms": _ms(direct_ms, 99),
        },
        "lease": {
            "bind_p50_ms": _ms(binds, 50),
            "bind_p99_ms": _ms(binds, 99),
            "release_p50_ms": _ms(releases, 50),
            "release_p99_ms": _ms(releases, 99),
        },
        "_samples": {"client_call_ms": call_ms, "client_direct_ms": direct_ms, "bind_ms": binds},
    }
