"""The whole local cluster in one async context manager: API server, CRDs, kubelet, operator.

``async with LocalCluster(dir) as cluster:`` starts the in-memory API server on loopback (HTTPS with
a CA of its own, a bearer token and a service-account signing key, all kept under ``dir/pki``:
:mod:`agentpool.local.pki`), writes ``dir/kubeconfig`` (context ``agentpool-local``, with the CA and
the token), applies the agentpool CRDs (rendered from the models in :mod:`agentpool.api`, so an
installed package needs no checkout) and the ClusterRoles the chart gives users to bind
(``agentpool-caller``, from :mod:`agentpool.api.roles`), and starts the local kubelet and, when
given one, the operator in its own thread and event loop; both reach the API server as any client
does, the kubelet by ``cluster.access`` and the operator by the kubeconfig. The caller hands in the
operator to run (:func:`agentpool.handlers.operator.embedded_operator`), so the local cluster never
imports the operator's handlers or its I/O modules. On exit it stops them in reverse order and no
process it started is left. A lock file in dir makes a second cluster on the same directory fail
clearly. Used by ``agentpool local up``, ``agentpool demo`` and the test fixtures.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import aiohttp
import yaml

from agentpool.api.crds import render_crds
from agentpool.api.roles import user_cluster_roles
from agentpool.local import eventloop, pki
from agentpool.local.apiserver import ApiServer
from agentpool.local.apiserver.storage.store import DEFAULT_HISTORY, HistoryLimits
from agentpool.local.kubeconfig import ApiAccess, write_kubeconfig
from agentpool.local.kubelet import Kubelet

logger = logging.getLogger(__name__)

# operator(kubeconfig, stop_flag): runs the operator against the cluster that kubeconfig names
# until stop_flag is set. It is awaited in a thread with its own event loop, because kopf cancels
# every task of the loop it runs in.
OperatorRunner = Callable[[Path, asyncio.Event], Awaitable[None]]

LOCK_NAME = "local.lock"


class ClusterBusy(RuntimeError):
    """The directory or the port is already taken by another local cluster or program."""


def crd_manifests() -> list[dict[str, Any]]:
    """The agentpool CRDs, rendered from the models as ``agentpool crds`` writes them to crds/
    (``agentpool crds --check`` keeps the two the same)."""
    return [doc for text in render_crds().values() for doc in yaml.safe_load_all(text) if doc]


async def apply_crds(
    access: ApiAccess, manifests: list[dict[str, Any]], *, timeout: float = 10
) -> None:
    """Create each CRD and wait until discovery serves its resource."""
    server = access.server
    async with _session(access) as session:
        base = f"{server}/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        for manifest in manifests:
            await _create(session, base, manifest)
        async with asyncio.timeout(timeout):
            for manifest in manifests:
                spec = manifest["spec"]
                plural = spec["names"]["plural"]
                for version in spec["versions"]:
                    url = f"{server}/apis/{spec['group']}/{version['name']}"
                    while not await _serves(session, url, plural):  # noqa: ASYNC110
                        await asyncio.sleep(0.05)


async def apply_cluster_roles(access: ApiAccess, roles: Sequence[Mapping[str, Any]]) -> None:
    """Create each ClusterRole, as the chart does on a cluster, for users to bind."""
    async with _session(access) as session:
        base = f"{access.server}/apis/rbac.authorization.k8s.io/v1/clusterroles"
        for role in roles:
            await _create(session, base, role)


def _session(access: ApiAccess) -> aiohttp.ClientSession:
    context = access.ssl_context()
    connector = aiohttp.TCPConnector(ssl=context if context is not None else True)
    return aiohttp.ClientSession(connector=connector, headers=access.headers())


async def _create(session: aiohttp.ClientSession, url: str, manifest: Mapping[str, Any]) -> None:
    """POST the object; one already there (409) is left as it is."""
    async with session.post(url, json=manifest) as response:
        if response.status not in (200, 201, 409):
            raise RuntimeError(
                f"applying {manifest['kind']} {manifest['metadata']['name']} failed: "
                f"{response.status} {await response.text()}"
            )


async def _serves(session: aiohttp.ClientSession, url: str, plural: str) -> bool:
    async with session.get(url) as response:
        if response.status != 200:
            return False
        body = await response.json()
    return any(r.get("name") == plural for r in body.get("resources") or [])


class OperatorThread:
    """Runs an :data:`OperatorRunner` in a daemon thread with its own loop; ``stop()`` ends it,
    and the thread ends once the operator's connections have closed too. ``on_end`` is called
    from the thread as it ends, however the operator stopped."""

    def __init__(
        self,
        runner: OperatorRunner,
        kubeconfig: Path,
        on_end: Callable[[], None] = lambda: None,
    ) -> None:
        self._runner = runner
        self._kubeconfig = kubeconfig
        self._on_end = on_end
        #: What stopped the operator, when an error or a cancellation did.
        self.error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._flag: asyncio.Event | None = None
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._main, name="agentpool-operator", daemon=True)

    def start(self) -> None:
        self.thread.start()
        self._ready.wait()

    def _main(self) -> None:
        try:
            # kopf leaves each watch mid-stream as it stops; those TLS closes finish before the
            # loop ends, so no socket of the operator outlives it.
            eventloop.run(self._serve())
        except Exception as error:
            self.error = error
            logger.exception("the operator stopped with an error")
        except BaseException as error:
            self.error = error
            raise
        finally:
            self._ready.set()
            self._on_end()

    @property
    def reason(self) -> str:
        """Why the operator ended, for a person: its error's type and message, if one ended it."""
        if self.error is None:
            return "it ended"
        return f"{type(self.error).__name__}: {self.error}"

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._flag = asyncio.Event()
        self._ready.set()
        await self._runner(self._kubeconfig, self._flag)

    def stop(self, timeout: float = 30) -> None:
        loop, flag = self._loop, self._flag
        if loop is not None and flag is not None and self.thread.is_alive():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(flag.set)
        self.thread.join(timeout)
        if self.thread.is_alive():
            logger.warning("the operator did not stop within %ss", timeout)


class LocalCluster:
    """API server, CRDs, kubelet and (when ``operator`` is given) the operator on loopback, with
    their files under ``dir``."""

    def __init__(
        self,
        dir: Path,
        *,
        port: int = 0,
        operator: OperatorRunner | None = None,
        kubelet: dict[str, Any] | None = None,
        history: HistoryLimits = DEFAULT_HISTORY,
    ) -> None:
        self.dir = Path(dir).resolve()
        self.port = port
        self.history = history
        self.operator = operator
        self.kubelet_options = dict(kubelet or {})
        self.kubeconfig = self.dir / "kubeconfig"
        self.api: ApiServer | None = None
        self.credentials: pki.Credentials | None = None
        self.kubelet: Kubelet | None = None
        self.operator_thread: OperatorThread | None = None
        #: Set once the operator has stopped, asked to or not.
        self.operator_ended = asyncio.Event()
        self._kubelet_task: asyncio.Task[None] | None = None
        self._lock: IO[str] | None = None

    @property
    def url(self) -> str:
        assert self.api is not None, "the cluster is not running"
        return str(self.api.url)

    @property
    def access(self) -> ApiAccess:
        """How a client reaches the API server: its URL, CA and token."""
        assert self.credentials is not None, "the cluster is not running"
        return ApiAccess(self.url, self.credentials.ca_pem, self.credentials.token)

    def counts(self) -> dict[tuple[str, str], int]:
        """Requests the API server answered, by (verb, resource)."""
        assert self.api is not None, "the cluster is not running"
        return dict(self.api.counts())

    async def __aenter__(self) -> LocalCluster:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = self._take_lock()
        try:
            await self._start()
        except BaseException:
            await self._stop()
            raise
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self._stop()

    async def _start(self) -> None:
        self.credentials = pki.load_or_create(self.dir / "pki")
        self.api = ApiServer(
            history=self.history,
            tls=self.credentials.tls,
            token=self.credentials.token,
            signing_key=self.credentials.signing_key_pem,
        )
        try:
            await self.api.start("127.0.0.1", self.port)
        except OSError as error:
            await self.api.stop()
            self.api = None
            raise ClusterBusy(
                f"port {self.port} on 127.0.0.1 is already in use ({error.strerror}); "
                "stop what listens there or pick another --port"
            ) from error
        assert self._lock is not None
        self._lock.seek(0)
        self._lock.truncate()
        self._lock.write(f"{os.getpid()} {self.url}\n")
        self._lock.flush()
        access = self.access
        write_kubeconfig(self.kubeconfig, access)
        await apply_crds(access, crd_manifests())
        await apply_cluster_roles(access, user_cluster_roles())
        self.kubelet = Kubelet(access, work_dir=self.dir / "pods", **self.kubelet_options)
        self._kubelet_task = asyncio.create_task(self.kubelet.run())
        async with asyncio.timeout(10):
            await self.kubelet.wait_started()
        if self.operator is not None:
            loop = asyncio.get_running_loop()

            def ended() -> None:
                with contextlib.suppress(RuntimeError):  # the cluster's loop has closed
                    loop.call_soon_threadsafe(self.operator_ended.set)

            self.operator_thread = OperatorThread(self.operator, self.kubeconfig, ended)
            self.operator_thread.start()

    async def _stop(self) -> None:
        if self.operator_thread is not None:
            await asyncio.to_thread(self.operator_thread.stop)
            self.operator_thread = None
        if self.kubelet is not None:
            await self.kubelet.stop()
            self.kubelet = None
        if self._kubelet_task is not None:
            await asyncio.gather(self._kubelet_task, return_exceptions=True)
            self._kubelet_task = None
        if self.api is not None:
            await self.api.stop()
            self.api = None
        if self._lock is not None:
            self._lock.seek(0)
            self._lock.truncate()
            self._lock.close()
            self._lock = None

    def _take_lock(self) -> IO[str]:
        path = self.dir / LOCK_NAME
        handle = path.open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise ClusterBusy(
                f"{self.dir} is in use by another local cluster (pid and URL: {holder}); "
                "stop it first or pick another --dir"
            ) from None
        return handle
