"""The local kubelet: runs the pods of the local API server as local process groups.

It lists and watches every pod, binds the unbound ones to the single node ``local``, and gives
each a :class:`~agentpool.local.kubelet.podworker.PodWorker` that runs the first container's
command on the pod's own loopback address, probes it and reports its status. A pod being
deleted has its process group ended within its grace period and is then removed from the API.
``stop()`` ends every process group it started. :class:`agentpool.local.cluster.LocalCluster`
runs it.

With ``simulated_delay`` (a switch for the benchmarks, not for ``agentpool local up``) it runs no
process at all: each pod is a :class:`~agentpool.local.kubelet.simulatedpods.SimulatedPod`, served
by one in-process agent (:mod:`agentpool.local.kubelet.simulator`) that echoes after that delay,
so one machine can hold thousands of agents.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any

import aiohttp

from agentpool.certificates import KeyPair
from agentpool.local.kubeconfig import ApiAccess
from agentpool.local.kubelet import kubeletserver, node, processes
from agentpool.local.kubelet.addresses import AddressPool
from agentpool.local.kubelet.images import ImageStore, images_enabled
from agentpool.local.kubelet.kubeletserver import KubeletServer
from agentpool.local.kubelet.podapi import Gone, PodApi
from agentpool.local.kubelet.podstatus import NODE_NAME
from agentpool.local.kubelet.podworker import PodWorker, release
from agentpool.local.kubelet.simulatedpods import SimulatedPod
from agentpool.local.kubelet.simulator import Simulator

logger = logging.getLogger(__name__)

TERMINAL = frozenset({"Succeeded", "Failed"})


class Kubelet:
    """Run pods from the API server that ``access`` reaches; logs and pod files go under work_dir.

    With ``register_node`` it registers its Node and keeps it current (a real control plane needs
    one); with ``serving`` (a certificate) and ``client_ca_pem`` it serves container logs on its
    own HTTPS port for a real API server's ``pods/log``.

    ``backoff_initial`` and ``backoff_max`` shape CrashLoopBackOff (a real kubelet uses 10 s and
    300 s; locally a shorter start keeps the edit-run loop quick). ``stop_grace`` bounds how long
    ``stop()`` lets each process group handle SIGTERM before SIGKILL.

    ``simulated_delay`` (seconds) simulates every pod instead of running it: Ready without a
    process, its agent echoing each item after that delay.

    ``images`` (default: ``AGENTPOOL_KUBELET_IMAGES=1`` in the environment, else off) runs each
    container from its image where podman's local storage has it and the kubelet is root: in the
    image's root filesystem, with its entrypoint, environment, working directory and user merged
    with the pod's, the pod's volumes mounted (:mod:`agentpool.local.kubelet.imagerun`). Other
    containers run on the host as ever, and an Event on the pod says which way it runs. Off, every
    container runs on the host and no Event is recorded, as before, except in a pod annotated
    ``local.agentpool.dev/run-from-image: "true"``, which runs from its image either way.
    """

    def __init__(
        self,
        access: ApiAccess,
        *,
        work_dir: Path,
        node_name: str = NODE_NAME,
        backoff_initial: float = 1.0,
        backoff_max: float = 60.0,
        stop_grace: float = 2.0,
        cwd: Path | None = None,
        register_node: bool = False,
        serving: KeyPair | None = None,
        client_ca_pem: bytes | None = None,
        version: str = "v0.0.0-local",
        simulated_delay: float | None = None,
        images: bool | None = None,
    ) -> None:
        self.access = access
        self.work_dir = Path(work_dir).resolve()
        self.node_name = node_name
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.stop_grace = stop_grace
        self.cwd = (cwd or Path.cwd()).resolve()
        self.register_node = register_node
        self.version = version
        self._server: KubeletServer | None = None
        if serving is not None:
            assert client_ca_pem is not None, "a kubelet port needs the CA of its clients"
            context = kubeletserver.server_context(serving, client_ca_pem)
            self._server = KubeletServer(self._find_pod, self._log_path, context)
        self._heartbeat: asyncio.Task[None] | None = None
        self.base_env: Mapping[str, str] = processes.base_env()
        self.addresses = AddressPool()
        self.images = ImageStore()
        self.images_for_every_pod = images_enabled(images, os.environ)
        self.workers: dict[str, PodWorker] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._run_task: asyncio.Task[None] | None = None
        self._started = asyncio.Event()
        self._api: PodApi | None = None
        self._probe_session: aiohttp.ClientSession | None = None
        self._simulator = Simulator(simulated_delay) if simulated_delay is not None else None

    @property
    def api(self) -> PodApi:
        assert self._api is not None, "the kubelet is not running"
        return self._api

    @property
    def simulator(self) -> Simulator:
        assert self._simulator is not None, "the kubelet runs its pods, it simulates none"
        return self._simulator

    @property
    def probe_session(self) -> aiohttp.ClientSession:
        assert self._probe_session is not None, "the kubelet is not running"
        return self._probe_session

    async def wait_started(self) -> None:
        """Return once the first list of pods has been taken over."""
        await self._started.wait()

    async def run(self) -> None:
        """Watch pods and run them until cancelled or stopped."""
        self._run_task = asyncio.current_task()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._api = PodApi(self.access)
        # Probes open a fresh connection each time, as the kubelet's do, so a dead agent is seen.
        self._probe_session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(force_close=True, limit=0)
        )
        try:
            if self._simulator is not None:
                await self._simulator.start()
            if self._server is not None:
                await self._server.start()
            if self.register_node:
                port = self._server.port if self._server is not None else 0
                self._heartbeat = asyncio.create_task(
                    node.heartbeat(
                        self.api, self.node_name, kubelet_port=port, version=self.version
                    )
                )
            await self._watch()
        finally:
            await self._shutdown()

    def _worker(self, namespace: str, name: str) -> PodWorker | None:
        for worker in self.workers.values():
            if worker.namespace == namespace and worker.name == name:
                return worker
        return None

    def _find_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        worker = self._worker(namespace, name)
        return worker.pod if worker is not None else None

    def _log_path(self, namespace: str, name: str) -> Path | None:
        worker = self._worker(namespace, name)
        return worker.log_path if worker is not None else None

    async def stop(self) -> None:
        """Stop watching and end every process group this kubelet started."""
        task = self._run_task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])
        await self._shutdown()

    async def _watch(self) -> None:
        resource_version: str | None = None
        while True:
            try:
                if resource_version is None:
                    pods, resource_version = await self.api.list_pods()
                    self._take_over(pods)
                    self._started.set()
                async for kind, pod in self.api.watch_pods(resource_version):
                    resource_version = pod["metadata"].get("resourceVersion") or resource_version
                    if kind != "BOOKMARK":
                        self._observe(kind, pod)
            except Gone:
                resource_version = None
            except (aiohttp.ClientError, OSError, ValueError) as error:
                logger.warning("pod watch interrupted (%s); watching again", error)
                await asyncio.sleep(0.5)

    def _take_over(self, pods: list[dict[str, Any]]) -> None:
        """After a fresh list: start what is new, and treat what vanished as deleted."""
        present = {pod["metadata"].get("uid", "") for pod in pods}
        for uid, worker in list(self.workers.items()):
            if uid not in present:
                worker.vanish()
        for pod in pods:
            self._observe("ADDED", pod)

    def _observe(self, kind: str, pod: Mapping[str, Any]) -> None:
        metadata = pod.get("metadata") or {}
        uid = metadata.get("uid", "")
        node = (pod.get("spec") or {}).get("nodeName")
        if node and node != self.node_name:
            return
        worker = self.workers.get(uid)
        if kind == "DELETED":
            if worker is not None:
                worker.vanish()
            return
        if worker is not None:
            worker.update(pod)
            return
        phase = (pod.get("status") or {}).get("phase")
        if metadata.get("deletionTimestamp") or (node and phase in TERMINAL):
            # Not ours to run (this kubelet never started it): only finish a pending deletion.
            if metadata.get("deletionTimestamp"):
                self._spawn(uid, self._forget(pod))
            return
        worker = PodWorker(self, pod) if self._simulator is None else SimulatedPod(self, pod)
        self.workers[uid] = worker
        self._spawn(uid, worker.run())

    async def _forget(self, pod: Mapping[str, Any]) -> None:
        with contextlib.suppress(aiohttp.ClientError):
            await release(self.api, pod)

    def _spawn(self, uid: str, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks[uid] = task
        task.add_done_callback(functools.partial(self._finished, uid))

    def _finished(self, uid: str, task: asyncio.Task[None]) -> None:
        if self._tasks.get(uid) is task:
            del self._tasks[uid]
            self.workers.pop(uid, None)
        if not task.cancelled() and task.exception() is not None:
            logger.error("pod worker %s failed", uid, exc_info=task.exception())

    async def _shutdown(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            await asyncio.gather(self._heartbeat, return_exceptions=True)
            self._heartbeat = None
        if self._server is not None:
            await self._server.stop()
        tasks = list(self._tasks.values())
        workers = list(self.workers.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(w.kill(self.stop_grace) for w in workers), return_exceptions=True)
        self.workers.clear()
        if self._simulator is not None:
            await self._simulator.stop()
        self.addresses.close()
        await self.images.close()
        if self._api is not None:
            await self._api.close()
            self._api = None
        if self._probe_session is not None:
            await self._probe_session.close()
            self._probe_session = None
