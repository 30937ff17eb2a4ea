"""Scenario 4: many items through the HTTP source, and what they cost the operator.

A small source service (aiohttp, on 127.0.0.1, in the bench's process) hands out ``items`` items
one per ``POST`` (``{"item": ...}``, then ``{"done": true}``) to a PoolRun with ``cap: 64`` on a
pool of 8 to 32 echo agents, which overflows as the waiters appear. The figures: items a second
from the run's creation to its completion, the operator process's peak resident memory
(``VmHWM`` in ``/proc/PID/status``, the whole process life, which is this scenario alone), and the
size of the PoolRun object as the API server serves it at the end (its JSON).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from bench.harness import ROOT, Stage, Watcher, finished, pool_spec

CAP = 64
MIN_AGENTS, MAX_AGENTS = 8, 32
AGENT = ROOT / "bench" / "echo_agent.py"
SAMPLE_SECONDS = 0.25


class ItemSource:
    """``POST /`` answers the next item, then ``{"done": true}``; counts what it handed out.

    With ``batched`` it answers as many as the request's ``max`` allows (``{"items": [...]}``);
    :meth:`restart` hands the same items out again, under ids that start with ``prefix``.
    """

    def __init__(self, count: int, *, batched: bool = False, text: str = "x" * 64) -> None:
        self.count = count
        self.batched = batched
        self.text = text
        self.prefix = "item"
        self.given = 0
        self.requests = 0
        self.runner: web.AppRunner | None = None
        self.url = ""

    def restart(self, prefix: str) -> None:
        self.prefix, self.given, self.requests = prefix, 0, 0

    def _item(self, index: int) -> dict[str, str]:
        return {"id": f"{self.prefix}-{index:06d}", "text": self.text}

    async def next_item(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests += 1
        if self.given >= self.count:
            return web.json_response({"done": True})
        start = self.given
        if not self.batched:
            self.given += 1
            return web.json_response({"item": self._item(start)})
        self.given = min(self.count, start + max(1, int(body.get("max") or 1)))
        items = [self._item(index) for index in range(start, self.given)]
        return web.json_response({"items": items, "done": self.given >= self.count})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/", self.next_item)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = self.runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}/"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


async def run(work: Path, *, items: int) -> dict[str, Any]:
    """Scenario 4; the figures for results.json and the samples for the plots."""
    source = ItemSource(items)
    await source.start()
    try:
        async with Stage(work, "scale") as stage:
            kube = stage.kube
            operator = stage.operator
            assert operator is not None
            namespace = await kube.new_namespace("bench")
            spec = pool_spec(AGENT, minSize=MIN_AGENTS, maxSize=MAX_AGENTS)
            await kube.create("agentpools", namespace, "echo", spec)
            runs = Watcher(kube, f"/apis/agentpool.dev/v1alpha1/namespaces/{namespace}/poolruns")
            await runs.start()
            run_spec = {
                "poolRef": {"name": "echo"},
                "cap": CAP,
                "itemId": "id",
                "checkoutTimeoutSeconds": 120,
                "source": {"http": {"url": source.url}},
            }
            started = time.monotonic()
            await kube.create("poolruns", namespace, "scale", run_spec)
            memory: list[tuple[float, float]] = []
            deadline = started + 120 + items * 0.1
            while not finished(runs.objects.get("scale", {})):
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"the scale run did not finish within {deadline - started:.0f}s"
                    )
                memory.append((time.monotonic() - started, operator.memory_kib("VmRSS") / 1024))
                await asyncio.sleep(SAMPLE_SECONDS)
            ended_at, _ = await runs.wait(
                lambda name, obj: name == "scale" and finished(obj), timeout=1, what="the end"
            )
            seconds = ended_at - started
            peak = operator.memory_kib("VmHWM") / 1024
            raw = await kube.get_raw("poolruns", namespace, "scale")
            progress = [
                (at - started, int((obj.get("status") or {}).get("succeeded") or 0))
                for at, _kind, obj in runs.history
                if obj["metadata"]["name"] == "scale"
            ]
            agents = len(await kube.pods(namespace, "echo"))
            await runs.stop()
    finally:
        await source.stop()
    return {
        "scale": run_figures(items, seconds=seconds, peak=peak, raw=raw, agents=agents),
        "_samples": {"scale_progress": progress, "scale_rss_mib": memory},
    }


def run_figures(
    items: int, *, seconds: float, peak: float, raw: bytes, agents: int
) -> dict[str, Any]:
    """What a large run through the pool came to: its pace, the operator's peak memory, and
    the size and outcome of the PoolRun object as read back (``raw``, its JSON)."""
    status = json.loads(raw).get("status") or {}
    return {
        "items": items,
        "cap": CAP,
        "min_agents": MIN_AGENTS,
        "max_agents": MAX_AGENTS,
        "agents_at_end": agents,
        "seconds": round(seconds, 3),
        "items_per_second": round(items / seconds, 1),
        "peak_rss_mib": round(peak, 1),
        "object_bytes": len(raw),
        "result_configmaps": len(status.get("resultRefs") or []),
        "succeeded": status.get("succeeded"),
        "phase": status.get("phase"),
    }
