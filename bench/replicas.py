"""``python -m bench.replicas``: three operator replicas sharing six pools, measured by callers.

On a fresh local cluster, three ``agentpool run --share`` replicas work on six pools of one echo
agent each. A steady caller per pool calls it through the gateways of replicas that do not work
on the pool (so every call is passed on between replicas), one call after another. Then:

- the replica that works on the most pools is SIGKILLed: the calls to its pools wait until its
  Lease lapses and another replica takes them; the others' calls go on;
- the replica that now works on the most is sent SIGTERM: it gives its Lease up as it exits;
- a rolling restart, as a Deployment's RollingUpdate (maxSurge 1, maxUnavailable 0) makes one:
  for each replica in turn a new one starts, and once it has taken its share of the pools, the
  old one is taken out of the callers' rotation (as a terminating pod leaves a Service's
  endpoints) and sent SIGTERM.

For each, per pool: calls failed, the outage (the first failed call to the first call that
succeeded after it), and the longest call (one that waited while its pool changed hands).
Beside them, in the same run, the cost of passing a call on: a call's p50 through the pool's own
replica's gateway and through another's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import socket
import ssl
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from agentpool.local.kubeconfig import ApiAccess
from agentpool.pool.placement import choose
from bench.harness import (
    ROOT,
    ClusterProcess,
    Kube,
    OperatorProcess,
    pool_spec,
    until,
)

AGENT = ROOT / "bench" / "echo_agent.py"
GROUP_NAME = "bench"
REPLICA = "agentpool.dev/replica"
POOLS = [f"p{index}" for index in range(6)]
CALL_TIMEOUT = 30.0


@dataclass
class Caller:
    """One pool's steady caller: each call's start, end and whether it was answered."""

    pool: str
    calls: list[tuple[float, float, bool]] = field(default_factory=list)

    def since(self, moment: float) -> list[tuple[float, float, bool]]:
        """The calls that ended after ``moment``: those in flight then too."""
        return [call for call in self.calls if call[1] >= moment]

    def figures(self, moment: float) -> dict[str, Any]:
        """From ``moment`` on: calls, those failed, the outage, and the longest call (one that
        waited while its pool changed hands is slow rather than failed)."""
        after = self.since(moment)
        failed, lasted = outage(after)
        return {
            "pool": self.pool,
            "failed": failed,
            "outage_s": round(lasted, 2),
            "calls": len(after),
            "longest_call_s": round(max(end - start for start, end, _ in after), 2),
        }


async def replica_gateways(kube: Kube) -> dict[str, str]:
    """Each live replica's gateway, as its Lease names it."""
    url = f"{kube.server}/apis/coordination.k8s.io/v1/namespaces/default/leases"
    listed = await kube._call("list", "GET", url)
    return {
        item["spec"]["holderIdentity"]: gateway
        for item in listed["items"]
        if (gateway := (item["metadata"].get("annotations") or {}).get("agentpool.dev/gateway"))
    }


async def owners(kube: Kube, namespace: str) -> dict[str, str]:
    found = {}
    for pool in POOLS:
        body = await kube.get("agentpools", namespace, pool)
        found[pool] = (body["metadata"].get("labels") or {}).get(REPLICA, "")
    return found


async def served(kube: Kube, namespace: str, live: set[str]) -> dict[str, str] | None:
    """Each pool's replica, once every pool is where the live replicas' placement puts it
    (hand-overs done) and has its agent Ready."""
    placed = await owners(kube, namespace)
    for pool in POOLS:
        status = (await kube.get("agentpools", namespace, pool)).get("status") or {}
        if placed[pool] != choose((namespace, pool), live) or status.get("readyReplicas") != 1:
            return None
    return placed


#: Why calls failed, over the whole run: status and reason (or the client's error).
FAILURES: Counter[str] = Counter()


async def call(
    session: aiohttp.ClientSession, gateway: str, namespace: str, pool: str, n: int
) -> bool:
    url = f"{gateway}/v1/namespaces/{namespace}/agentpools/{pool}/call"
    try:
        async with session.post(
            url, json={"item": {"n": n}}, timeout=aiohttp.ClientTimeout(total=CALL_TIMEOUT)
        ) as response:
            body = await response.read()
            if response.status == 200 and json.loads(body).get("output") == {"n": n}:
                return True
            error = json.loads(body).get("error") or {}
            # Grouped by what went wrong, not by which replica's address it names.
            message = re.sub(r"https://[^ )]+", "GATEWAY", str(error.get("message") or ""))
            FAILURES[f"{response.status} {error.get('reason')}: {message}"] += 1
            return False
    except (aiohttp.ClientError, TimeoutError, ValueError) as error:
        FAILURES[type(error).__name__] += 1
        return False


async def steady(
    session: aiohttp.ClientSession,
    caller: Caller,
    namespace: str,
    gateways: Callable[[str], list[str]],
    stop: asyncio.Event,
) -> None:
    """Call the pool one call after another, through the gateways ``gateways(pool)`` names in
    turn, until ``stop``; a failed call is followed by the next after 50 ms, as a client's
    retry would be."""
    n = 0
    while not stop.is_set():
        through = gateways(caller.pool)
        start = time.monotonic()
        ok = await call(session, through[n % len(through)], namespace, caller.pool, n)
        caller.calls.append((start, time.monotonic(), ok))
        n += 1
        if not ok:
            await asyncio.sleep(0.05)


def outage(calls: list[tuple[float, float, bool]]) -> tuple[int, float]:
    """Calls failed, and seconds from the first failed call's start to the end of the first
    call answered after it (0 with none failed)."""
    failed = [call for call in calls if not call[2]]
    if not failed:
        return 0, 0.0
    first = failed[0][0]
    back = next((call[1] for call in calls if call[2] and call[0] > first), calls[-1][1])
    return len(failed), back - first


async def relay_cost(
    session: aiohttp.ClientSession,
    namespace: str,
    placed: dict[str, str],
    gateways: dict[str, str],
    count: int,
) -> tuple[float, float]:
    """A call's p50 in ms through the pool's own replica's gateway, and through another's."""
    pool = POOLS[0]
    own = gateways[placed[pool]]
    other = next(url for replica, url in gateways.items() if replica != placed[pool])
    times: dict[str, list[float]] = {own: [], other: []}
    for n in range(count):
        for gateway in (own, other):
            start = time.perf_counter()
            assert await call(session, gateway, namespace, pool, n)
            times[gateway].append((time.perf_counter() - start) * 1000)
    return statistics.median(times[own]), statistics.median(times[other])


async def event(
    name: str,
    how: signal.Signals,
    replicas: dict[str, OperatorProcess],
    kube: Kube,
    session: aiohttp.ClientSession,
    namespace: str,
    seconds: float,
) -> dict[str, Any]:
    """Stop the replica that works on the most pools with ``how`` under steady callers."""
    placed = await owners(kube, namespace)
    victim = Counter(placed.values()).most_common(1)[0][0]
    gateways = await replica_gateways(kube)
    survivors = {replica for replica in replicas if replica != victim}

    def through(pool: str) -> list[str]:
        # Not the pool's own replica's, so calls are passed on (unless it is the only one left),
        # and never the victim's, as a Service stops sending calls to a pod that is going.
        others = [gateways[r] for r in sorted(survivors) if r != placed[pool] and r in gateways]
        return others or [gateways[r] for r in sorted(survivors) if r in gateways]

    callers = [Caller(pool) for pool in POOLS]
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(steady(session, caller, namespace, through, stop)) for caller in callers
    ]
    await asyncio.sleep(2)
    moment = time.monotonic()
    process = replicas.pop(victim).process
    assert process is not None
    process.send_signal(how)
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.gather(*tasks)
    await asyncio.to_thread(process.wait, 60)
    result: dict[str, Any] = {"event": name, "pools_moved": [], "pools_kept": []}
    for caller in callers:
        moved = placed[caller.pool] == victim
        result["pools_moved" if moved else "pools_kept"].append(caller.figures(moment))
    return result


def replica(work: Path, kubeconfig: Path, index: int) -> tuple[str, OperatorProcess]:
    """A replica started, and its name: host and pid, as a replica names itself without a
    POD_ID."""
    process = OperatorProcess(
        kubeconfig, work / f"replica-{index}.log", args=("--share", GROUP_NAME)
    )
    process.start()
    return f"{_host()}-{process.pid}", process


async def rolling(
    replicas: dict[str, OperatorProcess],
    kube: Kube,
    session: aiohttp.ClientSession,
    namespace: str,
    new: Callable[[], tuple[str, OperatorProcess]],
) -> dict[str, Any]:
    """Replace every replica, one at a time, under steady callers through every live gateway."""
    gateways = await replica_gateways(kube)
    rotation = sorted(gateways[name] for name in replicas)

    def through(pool: str) -> list[str]:
        return list(rotation)

    callers = [Caller(pool) for pool in POOLS]
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(steady(session, caller, namespace, through, stop)) for caller in callers
    ]
    await asyncio.sleep(2)
    moment = time.monotonic()
    for old in list(replicas):
        name, process = new()
        replicas[name] = process
        await joined(kube, namespace, set(replicas))
        rotation.append((await replica_gateways(kube))[name])
        rotation.remove(gateways[old])
        going = replicas.pop(old).process
        assert going is not None
        going.send_signal(signal.SIGTERM)
        await asyncio.to_thread(going.wait, 60)
        await until(
            lambda: served(kube, namespace, set(replicas)),
            timeout=120,
            what="its pools taken",
            interval=0.2,
        )
    await asyncio.sleep(2)
    stop.set()
    await asyncio.gather(*tasks)
    return {"event": "rolling restart", "pools": [c.figures(moment) for c in callers]}


async def run(work: Path, *, seconds: float, relay_calls: int) -> dict[str, Any]:
    cluster = ClusterProcess(work / "cluster")
    await asyncio.to_thread(cluster.start)
    access = ApiAccess.from_kubeconfig(cluster.kubeconfig)
    kube = Kube(access)
    processes: dict[str, OperatorProcess] = {}
    try:
        started = iter(range(100))

        def new() -> tuple[str, OperatorProcess]:
            return replica(work, cluster.kubeconfig, next(started))

        for _ in range(3):
            name, process = new()
            processes[name] = process
        namespace = await kube.new_namespace("replicas")
        for pool in POOLS:
            await kube.create("agentpools", namespace, pool, pool_spec(AGENT, minSize=1))
        live = set(processes)
        placed = await until(
            lambda: served(kube, namespace, live),
            timeout=120,
            what="every pool served",
            interval=0.2,
        )
        await until(
            lambda: _all_named(kube, live),
            timeout=30,
            what="every replica's gateway named",
            interval=0.2,
        )
        gateways = await replica_gateways(kube)
        configmap = await kube._call(
            "get",
            "GET",
            f"{kube.server}/api/v1/namespaces/{namespace}/configmaps/agentpool-gateway",
        )
        context = ssl.create_default_context(cadata=configmap["data"]["ca.crt"])
        headers = access.headers()
        connector = aiohttp.TCPConnector(ssl=context, limit=64)
        async with aiohttp.ClientSession(
            connector=connector, headers=headers, trust_env=False
        ) as session:
            own, other = await relay_cost(session, namespace, placed, gateways, relay_calls)
            killed = await event(
                "SIGKILL", signal.SIGKILL, processes, kube, session, namespace, seconds
            )
            await until(
                lambda: served(kube, namespace, set(processes)),
                timeout=60,
                what="pools back",
                interval=0.2,
            )
            stopped = await event(
                "SIGTERM", signal.SIGTERM, processes, kube, session, namespace, seconds
            )
            # Back to three, then every one of them replaced.
            while len(processes) < 3:
                name, process = new()
                processes[name] = process
            await joined(kube, namespace, set(processes))
            restarted = await rolling(processes, kube, session, namespace, new)
        return {
            "failures": dict(FAILURES),
            "call_p50_ms_own_replica": round(own, 2),
            "call_p50_ms_passed_on": round(other, 2),
            "passed_on_ratio": round(other / own, 2),
            "events": [killed, stopped],
            "rolling_restart": restarted,
        }
    finally:
        await kube.close()
        for process in processes.values():
            await asyncio.to_thread(process.stop)
        await asyncio.to_thread(cluster.stop)


async def joined(kube: Kube, namespace: str, live: set[str]) -> None:
    """Until every replica of ``live`` names its gateway and has taken its share of the pools."""
    await until(
        lambda: _all_named(kube, live), timeout=60, what="every gateway named", interval=0.2
    )
    await until(
        lambda: served(kube, namespace, live), timeout=120, what="the pools shared", interval=0.2
    )


async def _all_named(kube: Kube, live: set[str]) -> bool:
    return set(await replica_gateways(kube)) >= live


def _host() -> str:
    return socket.gethostname().lower()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="calls after each event")
    parser.add_argument("--relay-calls", type=int, default=200)
    parser.add_argument("--work", type=Path, help="keep the cluster's and replicas' logs here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-replicas-") as directory:
        work = args.work or Path(directory)
        figures = asyncio.run(run(work, seconds=args.seconds, relay_calls=args.relay_calls))
    print(
        f"call p50 through the pool's own replica {figures['call_p50_ms_own_replica']} ms, "
        f"passed on from another {figures['call_p50_ms_passed_on']} ms "
        f"(x{figures['passed_on_ratio']})"
    )
    for entry in figures["events"]:
        print(f"{entry['event']} of the replica with the most pools:")
        for kind in ("pools_moved", "pools_kept"):
            for pool in entry[kind]:
                print(
                    f"  {kind[6:]:5} {pool['pool']}: {pool['failed']} of {pool['calls']} calls "
                    f"failed, outage {pool['outage_s']} s, longest call {pool['longest_call_s']} s"
                )
    restart = figures["rolling_restart"]
    print("rolling restart of all three replicas (a new one up, then the old one SIGTERMed):")
    for pool in restart["pools"]:
        print(
            f"  {pool['pool']}: {pool['failed']} of {pool['calls']} calls failed, "
            f"longest call {pool['longest_call_s']} s"
        )
    print("failed calls by answer:", figures["failures"])
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
