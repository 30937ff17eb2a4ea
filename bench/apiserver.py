"""Benchmark: how many writes per second the local API server takes, and how many concurrent
watches it keeps fed.

Runs ``python -m agentpool.local.apiserver`` in its own process, applies the project's CRDs (or
a small stand-in), then from this process with aiohttp:

1. creates ``--items`` ConfigMaps with ``--concurrency`` requests in flight (writes/s);
2. creates as many custom resources, each pruned, defaulted and validated (CEL included);
3. merge-patches their status (the operator's hottest write);
4. lists them all at once (items/s of a full list);
5. opens ``--watchers`` watches, writes ``--events`` changes, and times until every watch has
   seen every event (events delivered/s, and whether any watch fell behind).

Prints the figures and writes them to ``bench/out/apiserver.json``.

    .venv/bin/python -m bench.apiserver [--items 20000] [--watchers 200] [--events 500]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from agentpool.local.kubeconfig import ApiAccess

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out" / "apiserver.json"
MAX_ITEMS = 200_000
MAX_WATCHERS = 2_000
CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "benchruns.bench.agentpool.dev"},
    "spec": {
        "group": "bench.agentpool.dev",
        "scope": "Namespaced",
        "names": {"plural": "benchruns", "singular": "benchrun", "kind": "BenchRun"},
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {
                    "cap": {"type": "integer", "minimum": 1, "default": 1},
                    "maxAttempts": {"type": "integer", "default": 1},
                    "items": {"type": "array", "items": {"type": "integer"}},
                }, "x-kubernetes-validations": [
                    {"rule": "self.cap <= 1000", "message": "cap must be at most 1000"}]},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            }}},
        }],
    },
}  # fmt: skip


async def _bounded(count: int, concurrency: int, make: Any) -> float:
    """Run ``make(i)`` for i < count with ``concurrency`` in flight; seconds taken."""
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in range(count):
        queue.put_nowait(index)

    async def worker() -> None:
        while not queue.empty():
            await make(queue.get_nowait())

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started


async def _check(response: aiohttp.ClientResponse, expected: int) -> None:
    if response.status != expected:
        raise RuntimeError(
            f"{response.method} {response.url}: {response.status} {await response.text()}"
        )


async def _watch(
    session: aiohttp.ClientSession, url: str, rv: str, wanted: int, ready: asyncio.Event
) -> int:
    """Follow a watch until ``wanted`` events arrived; returns how many were ERRORs."""
    seen = errors = 0
    params = {"watch": "true", "resourceVersion": rv, "timeoutSeconds": "300"}
    async with session.get(url, params=params, timeout=aiohttp.ClientTimeout(total=None)) as r:
        ready.set()
        async for line in r.content:
            if not line.strip():
                continue
            seen += 1
            if b'"type":"ERROR"' in line[:20]:
                errors += 1
                break
            if seen >= wanted:
                break
    return errors


async def _measure(access: ApiAccess, args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, Any] = {"items": args.items, "concurrency": args.concurrency}
    context = access.ssl_context()
    connector = aiohttp.TCPConnector(
        limit=args.concurrency + args.watchers + 8, ssl=context if context is not None else True
    )
    async with aiohttp.ClientSession(
        access.server, connector=connector, headers=access.headers()
    ) as s:
        crds = sorted((ROOT / "crds").glob("*.yaml"))
        for path in crds:
            async with s.post(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                json=yaml.safe_load(path.read_text()),
            ) as r:
                await _check(r, 201)
        async with s.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=CRD) as r:
            await _check(r, 201)

        async def create_cm(i: int) -> None:
            body = {"metadata": {"name": f"cm-{i}"}, "data": {"item": str(i)}}
            async with s.post("/api/v1/namespaces/default/configmaps", json=body) as r:
                await _check(r, 201)

        took = await _bounded(args.items, args.concurrency, create_cm)
        figures["configmap_creates_per_s"] = round(args.items / took)

        runs = "/apis/bench.agentpool.dev/v1/namespaces/default/benchruns"

        async def create_cr(i: int) -> None:
            body = {
                "apiVersion": "bench.agentpool.dev/v1",
                "kind": "BenchRun",
                "metadata": {"name": f"run-{i}"},
                "spec": {"cap": 4, "items": [1, 2, 3]},
            }
            async with s.post(runs, json=body) as r:
                await _check(r, 201)

        took = await _bounded(args.items, args.concurrency, create_cr)
        figures["validated_cr_creates_per_s"] = round(args.items / took)

        async def patch_status(i: int) -> None:
            body = {"status": {"succeeded": i, "active": 1, "items": {str(i): {"ok": True}}}}
            headers = {"Content-Type": "application/merge-patch+json"}
            async with s.patch(
                f"{runs}/run-{i}/status", data=json.dumps(body), headers=headers
            ) as r:
                await _check(r, 200)

        took = await _bounded(args.items, args.concurrency, patch_status)
        figures["status_patches_per_s"] = round(args.items / took)

        started = time.perf_counter()
        async with s.get(runs) as r:
            listed = await r.json()
        took = time.perf_counter() - started
        figures["list_items"] = len(listed["items"])
        figures["list_seconds"] = round(took, 3)

        rv = listed["metadata"]["resourceVersion"]
        ready_flags = [asyncio.Event() for _ in range(args.watchers)]
        watches = [
            asyncio.create_task(_watch(s, runs, rv, args.events, flag)) for flag in ready_flags
        ]
        await asyncio.wait_for(asyncio.gather(*(f.wait() for f in ready_flags)), 60)
        started = time.perf_counter()

        async def touch(i: int) -> None:
            headers = {"Content-Type": "application/merge-patch+json"}
            body = json.dumps({"metadata": {"labels": {"touched": str(i)}}})
            async with s.patch(f"{runs}/run-{i % args.items}", data=body, headers=headers) as r:
                await _check(r, 200)

        await _bounded(args.events, args.concurrency, touch)
        errors = await asyncio.wait_for(asyncio.gather(*watches), 600)
        took = time.perf_counter() - started
        figures["watchers"] = args.watchers
        figures["events_per_watcher"] = args.events
        figures["watch_seconds"] = round(took, 3)
        figures["events_delivered_per_s"] = round(args.watchers * args.events / took)
        figures["watchers_expired"] = sum(errors)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--watchers", type=int, default=200)
    parser.add_argument("--events", type=int, default=500)
    parser.add_argument("--history", type=int, default=10_000)
    args = parser.parse_args()
    args.items = min(args.items, MAX_ITEMS)
    args.watchers = min(args.watchers, MAX_WATCHERS)
    with tempfile.TemporaryDirectory(prefix="agentpool-bench-apiserver-") as directory:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "agentpool.local.apiserver", "--dir", directory),
                *("--history", str(args.history)),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert process.stdout is not None
            process.stdout.readline()
            access = ApiAccess.from_kubeconfig(Path(directory) / "kubeconfig")
            figures = asyncio.run(_measure(access, args))
        finally:
            process.terminate()
            process.wait(10)
    width = max(len(k) for k in figures)
    for key, value in figures.items():
        print(f"{key:<{width}}  {value}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
