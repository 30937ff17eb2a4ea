"""Scenario 6: how long an AgentLease takes to bind, and what its whole life writes to the API.

A pool of 32 echo agents, all Ready, and a watch on the namespace's leases opened before any is
made. Leases are created one at a time, then in bursts of 4 at once, then of 32 at once (each
burst on as many idle agents); the time of each is from its create request to the first watch
event that shows it ``Bound``. Each lease (or burst) is deleted once Bound, and the next begins
once the watch has seen every one of them gone, so each lease's whole life (created, bound,
deleted, its agent back) falls inside its phase. The API server's request counts around the
one-at-a-time phase give the writes per lease: the operator's, the create and the delete the
client sends, and on a real control plane the garbage collector's; then again with the
operator's lease Events off (``--no-lease-events``), what a lease writes of itself.

The baselines, in the same run on the same server, timed the same way, each in a namespace of
its own. A bare binder (:mod:`bench.binder`) answers leases with the two writes the operator
makes before ``Bound`` and nothing else, with the operator and the pool gone (``floor_*``). The
same binder writing the operator's own Secret and ``Bound`` status, beside the pool's 32 agents
Ready and idle (``writes_floor_*``), is what the lease's writes cost the API server and the
machine with nothing of the operator's own: no checkout, no agent to bind, no watch of its own.
What the operator takes beyond the second is its own.

Given a kubeconfig (``python -m bench --only lease --kubeconfig K``), the scenario runs a second
time on that cluster, with an operator of its own, and reports as ``lease_real``: a real control
plane whose nodes run the pool's pods as the local kubelet does (``python -m tests.controlplane
up``). Its counts are the server's own ``apiserver_request_total``, less the cluster's
heartbeats (coordination Leases and Node status, written every few seconds by its kubelet and
controllers whatever the leases do).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import secrets
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
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

    async def many(self, size: int, times: int) -> list[float]:
        """``times`` bursts of ``size``, one after another: every lease's create -> Bound, ms."""
        return [ms for _ in range(times) for ms in await self.burst(size)]


async def _counted(kube: Kube, namespace: str, work: Any) -> tuple[Any, Counter[tuple[str, str]]]:
    """What ``work`` gives, and the API requests served meanwhile: the operator's, this
    scenario's creates and deletes (its watch was opened before), and the garbage collector's
    deletes of the leases' Secrets (waited for: they come a little after each lease goes)."""
    before = await kube.counts()
    result = await work

    polls = Counter[tuple[str, str]]()

    async def collected() -> bool:
        polls["list", "secrets"] += 1
        return not await kube.owned_secrets(namespace, "AgentLease")

    await until(collected, timeout=60, what="the leases' Secrets collected", interval=0.1)
    return result, (await kube.counts()) - before - polls


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
            await wait_pool_ready(kube, namespace, "echo", AGENTS, timeout=180)
            found = await _measure(kube, namespace, leases=leases, bursts=bursts)
            # Again with the operator's lease Events off: what a lease writes of itself.
            await stage.restart_operator("--no-lease-events")
            async with _leasing(kube, namespace) as leasing:
                writes = await _writes_per_lease(kube, leasing, leases)
            found["lease"]["writes_per_lease_without_events"] = writes
            # The second baseline: the operator's own writes made by a bare binder, beside the
            # pool's agents still Ready and idle, the operator serving their namespace only.
            await stage.restart_operator("--namespace", namespace)
            found["lease"].update(
                await _floor(stage, leases=leases, bursts=bursts, operator_writes=True)
            )
        finally:
            if kubeconfig is not None:
                await _clean_up(kube, namespace)
        # The baseline: a bare binder on the same server, with no operator to race it.
        await stage.stop_operator()
        found["lease"].update(await _floor(stage, leases=leases, bursts=bursts))
    found["lease"]["cluster"] = "local" if kubeconfig is None else "real"
    return found


async def _floor(
    stage: Stage, *, leases: int, bursts: int, operator_writes: bool = False
) -> dict[str, Any]:
    """The bare binder's (:mod:`bench.binder`) create -> Bound, one at a time and in bursts,
    in a namespace of its own on the cluster the scenario measured; with ``operator_writes``,
    writing the operator's own Secret and Bound status (``writes_floor_*``)."""
    kube = stage.kube
    namespace = await kube.new_namespace(f"bench-floor-{secrets.token_hex(3)}")
    argv = [sys.executable, "-m", "bench.binder", str(stage.kubeconfig_path), namespace]
    argv += ["--operator-writes"] if operator_writes else []
    binder = await asyncio.create_subprocess_exec(*argv, cwd=ROOT, stdout=subprocess.PIPE)
    try:
        assert binder.stdout is not None
        said = await asyncio.wait_for(binder.stdout.readline(), timeout=60)
        if said.strip() != b"watching":
            raise RuntimeError(f"the bare binder did not start (it said {said!r})")
        async with _leasing(kube, namespace) as leasing:
            sequential = await leasing.many(1, leases)
            four = await leasing.many(4, bursts)
            all_at_once = await leasing.many(AGENTS, bursts)
    finally:
        if binder.returncode is None:
            binder.kill()
            await binder.wait()
        if stage.kubeconfig is not None:
            await kube.delete_namespace(namespace)
    name = "writes_floor" if operator_writes else "floor"
    return {
        f"{name}_p50_ms": _stats(sequential)["p50_ms"],
        f"{name}_burst4_p50_ms": _stats(four)["p50_ms"],
        f"{name}_burst32_p50_ms": _stats(all_at_once)["p50_ms"],
    }


async def _clean_up(kube: Kube, namespace: str) -> None:
    """The pool deleted while its operator runs (its agents drained and gone), then the
    namespace: a cluster of the caller's is left as it was."""
    await kube.delete("agentpools", namespace, "echo")

    async def gone() -> bool:
        return not await kube.list("agentpools", namespace)

    await until(gone, timeout=120, what="the bench pool deleted", interval=0.5)
    await kube.delete_namespace(namespace)


@contextlib.asynccontextmanager
async def _leasing(kube: Kube, namespace: str) -> AsyncIterator[Leasing]:
    """Leases of the namespace's pool "echo", timed on a watch opened first; one lease made and
    ended before any is timed, so the code paths are warm."""
    watcher = Watcher(kube, f"/apis/agentpool.dev/v1alpha1/namespaces/{namespace}/agentleases")
    await watcher.start()
    try:
        leasing = Leasing(kube, namespace, watcher)
        await leasing.burst(1)
        yield leasing
    finally:
        await watcher.stop()


async def _writes_per_lease(kube: Kube, leasing: Leasing, leases: int) -> float:
    """The API writes of ``leases`` leases made one at a time, per lease."""
    _, served = await _counted(kube, leasing.namespace, leasing.many(1, leases))
    return round(sum(_writes(served).values()) / leases, 2)


def _writes(served: Counter[tuple[str, str]]) -> Counter[tuple[str, str]]:
    return Counter(
        {key: n for key, n in served.items() if key[0] in WRITES and key[1] not in HEARTBEATS}
    )


async def _measure(kube: Kube, namespace: str, *, leases: int, bursts: int) -> dict[str, Any]:
    async with _leasing(kube, namespace) as leasing:
        sequential, served = await _counted(kube, leasing.namespace, leasing.many(1, leases))
        four, _ = await _counted(kube, leasing.namespace, leasing.many(4, bursts))
        many, _ = await _counted(kube, leasing.namespace, leasing.many(AGENTS, bursts))
    served = Counter({key: n for key, n in served.items() if key[1] not in HEARTBEATS})
    writes = _writes(served)
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
