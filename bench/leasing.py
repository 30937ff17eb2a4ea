"""Scenario 6: how long an AgentLease takes to bind, and what its whole life writes to the API.

A pool of 32 echo agents, all Ready, and a watch on the namespace's leases opened before any is
made. Leases are created one at a time, then in bursts of 4 at once, then of 32 at once (each
burst on as many idle agents); the time of each is from its create request to the first watch
event that shows it ``Bound``. Each lease (or burst) is deleted once Bound, and the next begins
once the watch has seen every one of them gone, so each lease's whole life (created, bound,
deleted, its agent back) falls inside its phase. The API server's request counts around the
one-at-a-time phase give the writes per lease: the operator's, the create and the delete the
client sends, and on a real control plane the garbage collector's.

Given a kubeconfig (``python -m bench --only lease --kubeconfig K``), the scenario runs a second
time on that cluster, with an operator of its own, and reports as ``lease_real``: a real control
plane whose nodes run the pool's pods as the local kubelet does (``python -m tests.controlplane
up``). Its counts are the server's own ``apiserver_request_total``, less the cluster's
heartbeats (coordination Leases and Node status, written every few seconds by its kubelet and
controllers whatever the leases do).
"""

from __future__ import annotations

import asyncio
import functools
import secrets
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.harness import (
    ROOT,
    Kube,
    Stage,
    Watcher,
    percentile,
    pool_spec,
    until,
    wait_pool_ready,
)

AGENT = ROOT / "bench" / "echo_agent.py"
AGENTS = 32
WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})
#: Resources a real control plane's own components write on a clock, not for any lease.
HEARTBEATS = frozenset({"leases", "nodes", "nodes/status"})


def _named(wanted: str, name: str, _obj: dict[str, Any]) -> bool:
    return name == wanted


def _bound(obj: dict[str, Any]) -> bool:
    return (obj.get("status") or {}).get("phase") == "Bound"


class Leasing:
    """Leases of one pool, made and ended as a client would, timed on one watch."""

    def __init__(self, kube: Kube, namespace: str, watcher: Watcher) -> None:
        self.kube = kube
        self.namespace = namespace
        self.watcher = watcher
        self.made = 0

    async def burst(self, size: int) -> list[float]:
        """``size`` leases created at once: each one's create -> Bound, ms; all gone after."""
        names = [f"lease-{self.made + n}" for n in range(size)]
        self.made += size

        async def one(name: str) -> float:
            started = time.monotonic()
            spec = {"poolRef": {"name": "echo"}}
            await self.kube.create("agentleases", self.namespace, name, spec)
            at, _ = await self.watcher.wait(
                lambda seen, obj: _named(name, seen, obj) and _bound(obj),
                timeout=60,
                what=f"lease {name} bound",
                since=started,
            )
            return (at - started) * 1000

        latencies = await asyncio.gather(*(one(name) for name in names))
        deleted = time.monotonic()
        await asyncio.gather(*(self.kube.delete("agentleases", self.namespace, n) for n in names))
        for name in names:
            await self.watcher.wait(
                functools.partial(_named, name),
                timeout=60,
                what=f"lease {name} gone",
                since=deleted,
                event="DELETED",
            )
        return list(latencies)


async def _counted(kube: Kube, work: Any) -> tuple[Any, Counter[tuple[str, str]]]:
    """What ``work`` gives, and the API requests served meanwhile: the operator's, and this
    scenario's creates and deletes (its watch was opened before)."""
    before = await kube.counts()
    result = await work
    return result, (await kube.counts()) - before


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(percentile(values, 50), 1),
        "p90_ms": round(percentile(values, 90), 1),
        "p99_ms": round(percentile(values, 99), 1),
        "max_ms": round(max(values), 1),
    }


async def run(
    work: Path, *, leases: int, bursts: int, kubeconfig: Path | None = None
) -> dict[str, Any]:
    """Scenario 6 on a local cluster, and with ``kubeconfig`` on that cluster too; the figures
    for results.json and the samples for the plots."""
    found = await _run(work / "local", leases=leases, bursts=bursts, kubeconfig=None)
    if kubeconfig is not None:
        real = await _run(work / "real", leases=leases, bursts=bursts, kubeconfig=kubeconfig)
        found["lease_real"] = real.pop("lease")
        found["_samples"].update({f"{k}_real": v for k, v in real["_samples"].items()})
    return found


async def _run(work: Path, *, leases: int, bursts: int, kubeconfig: Path | None) -> dict[str, Any]:
    async with Stage(work, "lease", kubeconfig=kubeconfig) as stage:
        kube = stage.kube
        # A cluster of the caller's may have a namespace "bench" already.
        name = "bench" if kubeconfig is None else f"bench-lease-{secrets.token_hex(3)}"
        namespace = await kube.new_namespace(name)
        if kubeconfig is not None:
            await kube.service_account(namespace)
        spec = pool_spec(AGENT, minSize=AGENTS, maxSize=AGENTS)
        await kube.create("agentpools", namespace, "echo", spec)
        try:
            found = await _measure(kube, namespace, leases=leases, bursts=bursts)
        finally:
            if kubeconfig is not None:
                await _clean_up(kube, namespace)
    found["lease"]["cluster"] = "local" if kubeconfig is None else "real"
    return found


async def _clean_up(kube: Kube, namespace: str) -> None:
    """The pool deleted while its operator runs (its agents drained and gone), then the
    namespace: a cluster of the caller's is left as it was."""
    await kube.delete("agentpools", namespace, "echo")

    async def gone() -> bool:
        return not await kube.list("agentpools", namespace)

    await until(gone, timeout=120, what="the bench pool deleted", interval=0.5)
    await kube.delete_namespace(namespace)


async def _measure(kube: Kube, namespace: str, *, leases: int, bursts: int) -> dict[str, Any]:
    await wait_pool_ready(kube, namespace, "echo", AGENTS, timeout=180)
    watcher = Watcher(kube, f"/apis/agentpool.dev/v1alpha1/namespaces/{namespace}/agentleases")
    await watcher.start()
    leasing = Leasing(kube, namespace, watcher)
    try:
        await leasing.burst(1)  # the code paths warm

        async def one_at_a_time() -> list[float]:
            return [ms for _ in range(leases) for ms in await leasing.burst(1)]

        async def in_bursts(size: int) -> list[float]:
            return [ms for _ in range(bursts) for ms in await leasing.burst(size)]

        sequential, served = await _counted(kube, one_at_a_time())
        four, _ = await _counted(kube, in_bursts(4))
        many, _ = await _counted(kube, in_bursts(AGENTS))
    finally:
        await watcher.stop()
    served = Counter({key: n for key, n in served.items() if key[1] not in HEARTBEATS})
    writes = Counter({key: n for key, n in served.items() if key[0] in WRITES})
    figures = {
        "leases": leases,
        "bursts": bursts,
        "agents": AGENTS,
        **_stats(sequential),
        "burst4_p50_ms": _stats(four)["p50_ms"],
        "burst4_max_ms": _stats(four)["max_ms"],
        "burst32_p50_ms": _stats(many)["p50_ms"],
        "burst32_max_ms": _stats(many)["max_ms"],
        "writes_per_lease": round(sum(writes.values()) / leases, 2),
        "requests_per_lease": round(sum(served.values()) / leases, 2),
        "writes_by_kind": {
            f"{verb} {resource}": round(n / leases, 2) for (verb, resource), n in writes.items()
        },
    }
    samples = {"lease_ms": sequential, "lease_burst4_ms": four, "lease_burst32_ms": many}
    return {"lease": figures, "_samples": samples}
