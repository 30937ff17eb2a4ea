"""What tests that need a cluster share: waiting on conditions, kubectl, the local cluster thread.

The fixtures in ``conftest.py`` build on these. :class:`ClusterThread` runs a
:class:`~agentpool.local.cluster.LocalCluster` in a background thread with its own event loop, so
synchronous tests, the blocking kubernetes client and kubectl can all use it; with
``--kube-context`` the same :class:`ClusterHandle` shape points at a real cluster instead.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from agentpool.io.connection import Connection, make_api_client
from agentpool.local import eventloop
from agentpool.local.kubeconfig import ApiAccess

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T], timeout: float = 30, *, interval: float = 0.05, message: str = ""
) -> T:
    """Poll predicate until it returns something truthy, and return that; fail at the deadline."""
    deadline = time.monotonic() + timeout
    last: T = predicate()
    while not last:
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"timed out after {timeout}s: {message or predicate}; last={last!r}"
            )
        time.sleep(interval)
        last = predicate()
    return last


def wait_while_progressing(
    predicate: Callable[[], T],
    progress: Callable[[], object],
    stall: float,
    *,
    limit: float,
    interval: float = 0.1,
    message: str = "",
) -> T:
    """:func:`wait_for` for long work: fail once ``progress()`` has not changed for ``stall``
    seconds (or at ``limit`` whatever happens), so a loaded machine slows the work without
    failing it, while work that has stopped still fails soon."""
    started = moved = time.monotonic()
    seen = progress()
    last: T = predicate()
    while not last:
        now = time.monotonic()
        if now - moved >= stall or now - started >= limit:
            raise AssertionError(
                f"no progress for {now - moved:.0f}s ({now - started:.0f}s in all): "
                f"{message or predicate}; last progress={seen!r}"
            )
        time.sleep(interval)
        current = progress()
        if current != seen:
            seen, moved = current, time.monotonic()
        last = predicate()
    return last


async def wait_for_async(
    predicate: Callable[[], Awaitable[T]],
    timeout: float = 30,
    *,
    interval: float = 0.05,
    message: str = "",
) -> T:
    """:func:`wait_for` for coroutines."""
    deadline = time.monotonic() + timeout
    last = await predicate()
    while not last:
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"timed out after {timeout}s: {message or predicate}; last={last!r}"
            )
        await asyncio.sleep(interval)
        last = await predicate()
    return last


def default_kubeconfig() -> Path:
    configured = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    return Path(configured) if configured else Path.home() / ".kube" / "config"


class Kubectl:
    """Runs kubectl against one kubeconfig (and context) with its own fresh cache directory."""

    def __init__(self, kubeconfig: Path, cache_dir: Path, *, context: str | None = None) -> None:
        binary = shutil.which("kubectl")
        if binary is None:
            pytest.skip("kubectl is not installed on this machine")
        self.binary = binary
        self.kubeconfig = kubeconfig
        self.cache_dir = cache_dir
        self.context = context

    def __call__(
        self, *args: str, check: bool = True, timeout: float = 60, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        command = [self.binary, "--kubeconfig", str(self.kubeconfig), "--cache-dir"]
        command.append(str(self.cache_dir))
        if self.context:
            command += ["--context", self.context]
        result = subprocess.run(
            [*command, *args], capture_output=True, text=True, timeout=timeout, input=input
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}"
            )
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "-o", "json").stdout)


@dataclass
class ClusterHandle:
    """A cluster for tests: the local one (``local=True``) or the --kube-context one."""

    kubeconfig: Path
    url: str | None = None
    context: str | None = None
    dir: Path | None = None
    counts: Callable[[], dict[tuple[str, str], int]] | None = field(default=None, repr=False)
    #: Why the local cluster's operator has stopped while the cluster runs; None while it runs.
    operator_stopped: Callable[[], str | None] = field(default=lambda: None, repr=False)

    @property
    def local(self) -> bool:
        return self.context is None

    def api_counts(self) -> dict[tuple[str, str], int]:
        """Requests the local API server answered, by (verb, resource); skips on a real cluster."""
        if self.counts is None:
            pytest.skip("request counts exist only on the local API server")
        return self.counts()

    def runs_local_processes(self) -> bool:
        """Whether this cluster's pods run as processes on this machine: the local cluster, or
        a real control plane whose node is the project's local kubelet (its Node ``local``,
        labelled ``type=local``)."""
        if self.local:
            return True
        import kubernetes

        api_client = self.api_client()
        try:
            nodes = kubernetes.client.CoreV1Api(api_client).list_node(label_selector="type=local")
            return any(node.metadata.name == "local" for node in nodes.items)
        finally:
            api_client.close()

    @property
    def access(self) -> ApiAccess:
        """The server, CA and token of the cluster's kubeconfig context."""
        return ApiAccess.from_kubeconfig(self.kubeconfig, context=self.context)

    def api_client(self) -> Any:
        """A kubernetes ApiClient for this cluster (close it when done), loaded as the
        operator loads it, so an operator thread starting beside it cannot race its load."""
        return make_api_client(Connection(kubeconfig=str(self.kubeconfig), context=self.context))


class ClusterThread:
    """A LocalCluster served from a background thread and event loop until ``stop()``."""

    def __init__(self, directory: Path, **options: Any) -> None:
        self.directory = directory
        self.options = options
        self.loop: asyncio.AbstractEventLoop | None = None
        self.cluster: Any = None
        self._stop: asyncio.Event | None = None
        self._started: Future[None] = Future()
        self.thread = threading.Thread(target=self._main, name="local-cluster", daemon=True)

    def start(self, timeout: float = 60) -> ClusterHandle:
        self.thread.start()
        self._started.result(timeout)
        return ClusterHandle(
            kubeconfig=self.cluster.kubeconfig,
            url=self.cluster.url,
            dir=self.directory,
            counts=self.counts,
            operator_stopped=self.operator_stopped,
        )

    def _main(self) -> None:
        try:
            # The kubelet leaves its pod watch mid-stream as it stops: that TLS close ends before
            # the loop does.
            eventloop.run(self._serve())
        except BaseException as error:
            if not self._started.done():
                self._started.set_exception(error)
            raise

    async def _serve(self) -> None:
        from agentpool.local.cluster import LocalCluster

        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with LocalCluster(self.directory, **self.options) as cluster:
            self.cluster = cluster
            self._started.set_result(None)
            await self._stop.wait()

    def call(self, work: Callable[[], Awaitable[T]], timeout: float = 30) -> T:
        """Run a coroutine function on the cluster's loop and return its result."""
        assert self.loop is not None

        async def run() -> T:
            return await work()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout)

    def operator_stopped(self) -> str | None:
        """Why the cluster's operator has stopped, if it has (None without an operator)."""
        cluster = self.cluster
        operator = cluster.operator_thread if cluster is not None else None
        if operator is None or not cluster.operator_ended.is_set():
            return None
        return str(operator.reason)

    def counts(self) -> dict[tuple[str, str], int]:
        async def read() -> dict[tuple[str, str], int]:
            return dict(self.cluster.counts())

        return self.call(read)

    def stop(self, timeout: float = 60) -> None:
        if self.loop is not None and self._stop is not None and self.thread.is_alive():
            self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(timeout)
