"""``ApiServer``: the local Kubernetes-compatible API server, in process or on its own thread.

``await ApiServer(tls=(cert, key), token=T, signing_key=K).start()`` serves HTTPS on loopback in
the caller's event loop and, as a real API server does, answers 401 to any request without the
admin token ``T`` or a service-account token it signed with ``K``, and 403 to one that RBAC does
not allow; without ``tls`` and ``token`` it serves plain, unauthenticated HTTP (only the server's
own unit tests and benchmarks want that). ``serve_in_thread()`` runs one on a daemon thread with
its own loop, for tests and for a kopf operator running in another thread. Both expose ``url``,
request ``counts()`` and ``reset_counts()``. ``agentpool.local.cluster`` and the tests start it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from aiohttp import web

from agentpool.local.apiserver.auth import policy
from agentpool.local.apiserver.auth.identities import Identities
from agentpool.local.apiserver.endpoints.auth import access_middleware, server_context
from agentpool.local.apiserver.endpoints.handlers import Routes
from agentpool.local.apiserver.endpoints.reviews import Reviews
from agentpool.local.apiserver.registry import metadata
from agentpool.local.apiserver.registry.core import Core
from agentpool.local.apiserver.registry.deletion import run_collector
from agentpool.local.apiserver.storage.store import DEFAULT_HISTORY, HistoryLimits

#: Seconds between sweeps that apply the history's age bound to resources nobody writes to.
TRIM_INTERVAL = 30.0


class ApiServer:
    """An in-memory API server on aiohttp; loopback only."""

    def __init__(
        self,
        *,
        history: HistoryLimits = DEFAULT_HISTORY,
        bookmark_interval: float = 30.0,
        clock: Callable[[], datetime] | None = None,
        tls: tuple[Path, Path] | None = None,
        token: str | None = None,
        signing_key: bytes | None = None,
    ) -> None:
        self.tls = tls
        self.token = token
        self.core = Core(history=history, clock=clock)
        policy.seed(self.core)
        self.identities = Identities(self.core, admin_token=token, signing_key=signing_key)
        self.authorizer = policy.Authorizer(self.core)
        self._stopping = False
        self.routes = Routes(
            self.core,
            bookmark_interval=bookmark_interval,
            stopping=lambda: self._stopping,
            reviews=Reviews(self.core, self.identities, self.authorizer),
        )
        self._runner: web.AppRunner | None = None
        self._collector: asyncio.Task[None] | None = None
        self._trimmer: asyncio.Task[None] | None = None
        self._port = 0
        self._host = "127.0.0.1"

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"the local API server listens on loopback only, not {host}")
        app = web.Application(client_max_size=metadata.REQUEST_BODY_LIMIT)
        app.middlewares.append(access_middleware(self.identities, self.authorizer))
        self.routes.attach(app)
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=2.0
        )
        await self._runner.setup()
        context = server_context(*self.tls) if self.tls is not None else None
        site = web.TCPSite(self._runner, host, port, reuse_address=True, ssl_context=context)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.base_events.Server)
        self._host = host
        self._port = server.sockets[0].getsockname()[1]
        self.core.gc_queue = asyncio.Queue()
        self._collector = asyncio.create_task(run_collector(self.core), name="apiserver-gc")
        self._trimmer = asyncio.create_task(self._trim_history(), name="apiserver-trim")

    async def _trim_history(self) -> None:
        # Writes trim their own resource's history; this reaches the ones that went quiet.
        while True:
            await asyncio.sleep(TRIM_INTERVAL)
            self.core.store.trim()

    @property
    def url(self) -> str:
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{self._host}:{self._port}"

    @property
    def port(self) -> int:
        return self._port

    async def stop(self) -> None:
        self._stopping = True
        self.core.store.wake_all()
        for task in (self._collector, self._trimmer):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._runner is not None:
            server = self._runner.server
            connections = list(server.connections) if server is not None else []
            transports = [c.transport for c in connections if c.transport is not None]
            await self._runner.cleanup()
            self._runner = None
            # A TLS connection closes only once the peer answers its close_notify, which a
            # client that keeps the connection idle never does; end those sockets outright.
            for transport in transports:
                transport.abort()

    def counts(self) -> dict[tuple[str, str], int]:
        """Requests served so far, by (verb, resource), e.g. ``("patch", "poolruns/status")``."""
        return dict(self.routes.counts)

    def reset_counts(self) -> None:
        self.routes.counts.clear()

    def compact(self) -> None:
        """Drop all watch history and expire open watches (410), as etcd compaction does."""
        self.core.store.compact()


class ServerThread:
    """An ``ApiServer`` running on its own daemon thread and event loop."""

    def __init__(
        self, server: ApiServer, loop: asyncio.AbstractEventLoop, thread: threading.Thread
    ) -> None:
        self.server = server
        self.loop = loop
        self.thread = thread

    @property
    def url(self) -> str:
        return self.server.url

    def counts(self) -> dict[tuple[str, str], int]:
        return self.server.counts()

    def reset_counts(self) -> None:
        self.server.reset_counts()

    def compact(self) -> None:
        """``ApiServer.compact`` on the server's own loop; returns once it is done."""
        done = asyncio.run_coroutine_threadsafe(self._compact(), self.loop)
        done.result(10)

    async def _compact(self) -> None:
        self.server.compact()

    def stop(self, timeout: float = 10.0) -> None:
        if not self.thread.is_alive():
            return
        future = asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop)
        with contextlib.suppress(Exception):
            future.result(timeout)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout)

    def __enter__(self) -> ServerThread:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_in_thread(port: int = 0, **options: Any) -> ServerThread:
    """Start an ``ApiServer`` on a daemon thread; returns once it accepts connections."""
    loop = asyncio.new_event_loop()
    server = ApiServer(**options)
    ready = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(server.start(port=port))
        except BaseException as error:
            failure.append(error)
            ready.set()
            return
        ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    thread = threading.Thread(target=run, name="agentpool-apiserver", daemon=True)
    thread.start()
    ready.wait()
    if failure:
        raise failure[0]
    return ServerThread(server, loop, thread)
