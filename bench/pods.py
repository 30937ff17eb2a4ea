"""Benchmark: how fast the local cluster starts many pods and reports them Ready, and removes them.

Starts a LocalCluster (API server and kubelet, no operator) in a temporary directory, creates
``--pods`` pods at once, each a small Python HTTP server on its own loopback address with an HTTP
readiness probe (``--period`` seconds), and follows them with a watch. It prints the time until all
are Running and all are Ready, the per-pod create-to-Ready latency (p50, p95, max), the status
patches the kubelet sent, and the time to delete them all (SIGTERM, process gone, pod removed),
and writes the figures to ``bench/out/pods.json``.

    .venv/bin/python bench/pods.py [--pods 50] [--period 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import aiohttp

from agentpool.local.cluster import LocalCluster

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out" / "pods.json"
MAX_PODS = 1000
SERVER = textwrap.dedent(
    """
    import http.server, os
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
        def log_message(self, *args):
            pass
    http.server.HTTPServer((os.environ["AGENT_HOST"], 8080), Health).serve_forever()
    """
)


def manifest(name: str, period: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench": "pods"}},
        "spec": {
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {
                    "name": "main",
                    "image": "none",
                    "command": ["python", "-c", SERVER],
                    "readinessProbe": {
                        "httpGet": {"path": "/", "port": 8080},
                        "periodSeconds": period,
                    },
                }
            ],
        },
    }


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


async def follow(
    session: aiohttp.ClientSession,
    url: str,
    resource_version: str,
    seen: dict[str, dict[str, float]],
    done: asyncio.Event,
    count: int,
) -> None:
    """Record when each pod was first Running and first Ready, from a watch."""
    params = {"watch": "true", "resourceVersion": resource_version}
    async with session.get(f"{url}/api/v1/namespaces/default/pods", params=params) as response:
        async for line in response.content:
            event = json.loads(line)
            pod = event["object"]
            times = seen.setdefault(pod["metadata"]["name"], {})
            now = time.monotonic()
            if (pod.get("status") or {}).get("phase") == "Running":
                times.setdefault("running", now)
            if is_ready(pod):
                times.setdefault("ready", now)
            if event["type"] == "DELETED":
                times.setdefault("deleted", now)
            if sum("ready" in t for t in seen.values()) == count:
                done.set()
            if sum("deleted" in t for t in seen.values()) == count:
                return


async def measure(count: int, period: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="agentpool-bench-") as tmp:
        async with LocalCluster(Path(tmp)) as cluster:
            context = cluster.access.ssl_context()
            connector = aiohttp.TCPConnector(ssl=context if context is not None else True)
            headers = cluster.access.headers()
            async with aiohttp.ClientSession(connector=connector, headers=headers) as s:
                return await _measure_in(cluster, s, count, period)


async def _measure_in(
    cluster: LocalCluster, s: aiohttp.ClientSession, count: int, period: int
) -> dict[str, Any]:
    url = cluster.url
    async with s.get(f"{url}/api/v1/namespaces/default/pods") as response:
        resource_version = (await response.json())["metadata"]["resourceVersion"]
    seen: dict[str, dict[str, float]] = {}
    all_ready = asyncio.Event()
    watcher = asyncio.create_task(follow(s, url, resource_version, seen, all_ready, count))
    before = cluster.counts()
    start = time.monotonic()
    created: dict[str, float] = {}

    async def create(i: int) -> None:
        name = f"bench-{i:04d}"
        created[name] = time.monotonic()
        body = manifest(name, period)
        async with s.post(f"{url}/api/v1/namespaces/default/pods", json=body) as r:
            r.raise_for_status()

    await asyncio.gather(*(create(i) for i in range(count)))
    await asyncio.wait_for(all_ready.wait(), timeout=300)
    ready_at = time.monotonic()
    after = cluster.counts()
    patches = after.get(("patch", "pods/status"), 0) - before.get(("patch", "pods/status"), 0)
    delete_start = time.monotonic()
    async with s.delete(
        f"{url}/api/v1/namespaces/default/pods", params={"labelSelector": "bench=pods"}
    ) as r:
        r.raise_for_status()
    await asyncio.wait_for(watcher, timeout=120)
    deleted_at = time.monotonic()
    latencies = sorted(seen[name]["ready"] - created[name] for name in created)
    running = max(seen[name]["running"] for name in created) - start
    return {
        "pods": count,
        "probePeriodSeconds": period,
        "allRunningSeconds": round(running, 3),
        "allReadySeconds": round(ready_at - start, 3),
        "readyLatencyP50Seconds": round(statistics.median(latencies), 3),
        "readyLatencyP95Seconds": round(latencies[int(0.95 * (len(latencies) - 1))], 3),
        "readyLatencyMaxSeconds": round(latencies[-1], 3),
        "statusPatchesUntilReady": patches,
        "deleteAllSeconds": round(deleted_at - delete_start, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=50)
    parser.add_argument("--period", type=int, default=1, help="readiness probe periodSeconds")
    args = parser.parse_args()
    count = max(1, min(args.pods, MAX_PODS))
    result = asyncio.run(measure(count, args.period))
    for key, value in result.items():
        print(f"{key:26} {value}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"benchmark": "pods", "results": result}, indent=2) + "\n")


if __name__ == "__main__":
    main()
