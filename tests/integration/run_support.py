"""What the PoolRun tests on the local cluster share: reading runs, starting them, counting calls.

The example agents record their invocations (``INVOCATIONS_FILE``), so a test can count exactly
what ran, across operator restarts; :class:`SourceService` is an HTTP source for a run.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from operator_support import REPO, Api

from cluster import wait_for, wait_while_progressing

FINISHED = ("Succeeded", "Failed")


def run_status(api: Api, namespace: str, name: str) -> dict[str, Any]:
    return api.status("poolruns", namespace, name)


def start_run(api: Api, namespace: str, name: str, items: Any = None, **spec: Any) -> None:
    """Create a PoolRun; ``items`` is the inline source unless ``spec`` names another."""
    if items is not None:
        spec["source"] = {"items": items}
    api.create("poolruns", namespace, name, spec)


def finished_run(api: Api, namespace: str, name: str, timeout: float = 90) -> dict[str, Any]:
    """The run's status once it has ended; fails once its progress has stood still ``timeout``
    seconds (a run that keeps recording items on a loaded machine is waited for, up to ten
    times as long)."""

    seen: dict[str, Any] = {}

    def finished() -> dict[str, Any] | None:
        seen.clear()
        seen.update(run_status(api, namespace, name))
        return dict(seen) if seen.get("phase") in FINISHED else None

    def progress() -> tuple[Any, ...]:
        return tuple(seen.get(key) for key in ("phase", "succeeded", "failed", "total", "active"))

    status = wait_while_progressing(
        finished,
        progress,
        timeout,
        limit=10 * timeout,
        message=f"run {name} finished",
    )
    return dict(status)


def ready_pool(api: Api, namespace: str, name: str, count: int, timeout: float = 60) -> None:
    wait_for(
        lambda: api.status("agentpools", namespace, name).get("readyReplicas", 0) >= count,
        timeout,
        message=f"{count} ready agents in pool {name}",
    )


def invocations(path: Path) -> dict[str, list[dict[str, Any]]]:
    """Every invocation the agents recorded, by item id, in the order they happened."""
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                found[record["id"]].append(record)
    return found


def condition(status: dict[str, Any], type: str) -> dict[str, Any]:
    return next(c for c in status.get("conditions", []) if c["type"] == type)


def agentpool_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The ``agentpool`` command, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "agentpool", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class SourceService:
    """A source service on 127.0.0.1, in a thread of its own: ``POST /`` hands out ``count``
    items made by ``make_item(n)``, one per request, then ``{"done": true}``; after
    ``fail_after`` items it answers HTTP 500 instead, as a source that broke would. With
    ``hold``, it answers no request until that event is set, as a source that hangs. With
    ``batch``, it answers as many items as each request's ``max`` allows (``{"items": [...]}``);
    ``maxes`` notes each request's ``max``."""

    def __init__(
        self,
        count: int,
        make_item: Callable[[int], Any],
        *,
        fail_after: int | None = None,
        hold: threading.Event | None = None,
        batch: bool = False,
    ) -> None:
        self.count = count
        self.batch = batch
        self.maxes: list[int] = []
        self.make_item = make_item
        self.fail_after = fail_after
        self.hold = hold
        self.handed = 0
        self.requests = 0
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    async def _answer(self, request: web.Request) -> web.Response:
        self.requests += 1
        body = await request.json()
        self.maxes.append(body.get("max"))
        if self.hold is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.hold.wait)
        if self.fail_after is not None and self.handed >= self.fail_after:
            return web.json_response({"error": "the source broke"}, status=500)
        if self.handed >= self.count:
            return web.json_response({"done": True})
        if self.batch:
            start = self.handed
            self.handed = min(self.count, start + body["max"])
            items = [self.make_item(n) for n in range(start, self.handed)]
            return web.json_response({"items": items, "done": self.handed >= self.count})
        self.handed += 1
        return web.json_response({"item": self.make_item(self.handed - 1)})

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/", self._answer)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}/"

    def __enter__(self) -> SourceService:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *_: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/"
