"""One pod's life on the local kubelet: bind, start, probe, restart, terminate, remove.

A :class:`PodWorker` runs as one asyncio task per pod. It owns the pod's process group, its
loopback address and its log file, keeps a
:class:`~agentpool.local.kubelet.podstatus.PodObservation`, and a reporter task patches the
rendered status whenever the observation changes, so a pod that turns Ready is reported at once.
Created and stopped by :class:`agentpool.local.kubelet.Kubelet`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import signal
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import aiohttp

from agentpool.local.apiserver.endpoints.logs import LOG_PATH_ANNOTATION
from agentpool.local.kubeconfig import ApiAccess, write_kubeconfig
from agentpool.local.kubelet import (
    imageconfig,
    imagerun,
    podenv,
    podstatus,
    probes,
    processes,
    recorder,
    volumes,
)
from agentpool.local.kubelet.addresses import AddressPool
from agentpool.local.kubelet.images import ImageStore, LocalImage, asks_for_image
from agentpool.local.kubelet.podapi import PodApi
from agentpool.local.kubelet.podstatus import PodObservation, Running, Terminated, Waiting

# Holds a deleted pod in the API (with its deletionTimestamp) until its processes have ended, as a
# real API server holds a bound pod for its kubelet; removed once the process group is gone.
FINALIZER = "local.agentpool.dev/kubelet"
DEFAULT_GRACE = 30.0
# A container that ran this many back-off caps without crashing starts its back-off afresh.
BACKOFF_RESET_FACTOR = 2.0
# Unhealthy Events of one pod waiting on the API server at once; past it, a failure posts none.
MAX_PENDING_EVENTS = 4

logger = logging.getLogger(__name__)


class Host(Protocol):
    """What a worker needs from its kubelet."""

    @property
    def api(self) -> PodApi: ...

    @property
    def probe_session(self) -> aiohttp.ClientSession: ...

    addresses: AddressPool
    work_dir: Path
    node_name: str
    backoff_initial: float
    backoff_max: float
    base_env: Mapping[str, str]
    cwd: Path
    access: ApiAccess
    images: ImageStore
    images_for_every_pod: bool


def now() -> datetime:
    return datetime.now(UTC)


def format_stamp(at: datetime) -> str:
    """An Event's timestamp: whole seconds, as core/v1 Events have them."""
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def finalizers_of(pod: Mapping[str, Any]) -> list[str]:
    return [f for f in (pod.get("metadata") or {}).get("finalizers") or [] if f != FINALIZER]


async def release(api: PodApi, pod: Mapping[str, Any]) -> None:
    """Let the API server remove a pod whose processes ended: drop our finalizer, then delete it
    with no grace (a no-op 404 when the finalizer was all that held it)."""
    metadata = pod["metadata"]
    namespace, name = metadata.get("namespace", "default"), metadata["name"]
    # Always patched: the watch event that shows our finalizer may not have arrived yet.
    await api.set_finalizers(namespace, name, finalizers_of(pod))
    await api.delete_pod(namespace, name, uid=metadata.get("uid", ""))


class PodWorker:
    def __init__(self, host: Host, pod: Mapping[str, Any]) -> None:
        self.host = host
        self.pod: Mapping[str, Any] = pod
        metadata = pod["metadata"]
        self.namespace: str = metadata.get("namespace", "default")
        self.name: str = metadata["name"]
        self.uid: str = metadata.get("uid", "")
        containers = (pod.get("spec") or {}).get("containers") or [{}]
        self.container: Mapping[str, Any] = containers[0]
        container_name = self.container.get("name", "main")
        self.log_path = (
            host.work_dir / f"{self.namespace}_{self.name}_{self.uid}" / f"{container_name}.log"
        )
        self.observation = PodObservation(
            container=container_name,
            image=str(self.container.get("image", "")),
            state=Waiting("ContainerCreating"),
            resources=self.container.get("resources") or None,
        )
        self.running: processes.Running | None = None
        self.ip: str | None = None
        # The image the container runs from, when the kubelet runs images and has this one.
        self.image: LocalImage | None = None
        self._token: str | None = None
        # The kubeconfig this kubelet wrote for the pod's token, the one file of the host it
        # hands to a container run from an image.
        self._kubeconfig: Path | None = None
        self._binds: list[volumes.Bind] = []
        self.deleting = asyncio.Event()
        self.gone = False
        self._changed = asyncio.Event()
        self._reported: dict[str, Any] = dict(pod.get("status") or {})
        self._events = recorder.EventRecorder()
        # One Event write at a time, so a repeat finds the name of the Event it repeats.
        self._posting = asyncio.Lock()
        # Unhealthy Events on their way, posted beside the probes rather than before their
        # results, so a slow API server never stretches a probe's period.
        self._posts: set[asyncio.Task[None]] = set()

    # Events from the kubelet's watch.

    def update(self, pod: Mapping[str, Any]) -> None:
        self.pod = pod
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            self.deleting.set()

    def vanish(self) -> None:
        """The pod is no longer in the API: stop its processes, and do not delete it again."""
        self.gone = True
        self.deleting.set()

    # Life cycle.

    async def run(self) -> None:
        reporter = asyncio.create_task(self._report())
        try:
            try:
                await self._live()
            except Exception as error:
                # A bug here must not leave an untracked agent running: end it and say so.
                logger.exception("pod %s/%s: the local kubelet failed", self.namespace, self.name)
                if self.running is not None:
                    await processes.terminate_group(self.running, 0)
                    self.running = None
                self._publish(
                    phase="Failed", ready=False, reason="KubeletError", message=str(error)
                )
                await self.deleting.wait()
        finally:
            reporter.cancel()
            for post in self._posts:
                post.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reporter
            await asyncio.gather(*self._posts, return_exceptions=True)
        await self._remove()

    async def kill(self, grace: float) -> None:
        """Used when the kubelet stops: end the process group, whatever the worker was doing."""
        if self.running is not None:
            await processes.terminate_group(self.running, grace)

    async def _live(self) -> None:
        if not await self._bind():
            return
        self.image = await self._find_image()
        argv = podenv.container_argv(self.container, {})
        if not argv and self.image is None:
            self._publish(
                state=Waiting(podstatus.NO_LOCAL_COMMAND, podstatus.NO_LOCAL_COMMAND_MESSAGE),
                phase="Failed",
                reason=podstatus.NO_LOCAL_COMMAND,
                message=podstatus.NO_LOCAL_COMMAND_MESSAGE,
            )
            await self.deleting.wait()
            return
        self.ip = self.host.addresses.allocate()
        self._publish(pod_ip=self.ip, start_time=now())
        backoff_steps = restarts = 0
        while not self.deleting.is_set():
            terminated = await self._run_once(restarts)
            if terminated is None or self.deleting.is_set():
                return
            ran = terminated.finished_at - (terminated.started_at or terminated.finished_at)
            if ran.total_seconds() > self.host.backoff_max * BACKOFF_RESET_FACTOR:
                backoff_steps = 0
            policy = (self.pod.get("spec") or {}).get("restartPolicy") or "Always"
            if not podstatus.restarts(policy, terminated.exit_code):
                self._publish(
                    state=terminated, phase=podstatus.final_phase(terminated.exit_code), ready=False
                )
                await self.deleting.wait()
                return
            backoff_steps += 1
            restarts += 1
            delay = podstatus.backoff_delay(
                backoff_steps, initial=self.host.backoff_initial, cap=self.host.backoff_max
            )
            message = (
                f"back-off {delay:g}s restarting failed container={self.observation.container} "
                f"pod={self.name}_{self.namespace}({self.uid})"
            )
            self._publish(state=Waiting("CrashLoopBackOff", message), last_state=terminated)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.deleting.wait(), timeout=delay)

    async def _run_once(self, restarts: int) -> Terminated | None:
        """Start the container once and supervise it; None when deletion ended it."""
        assert self.ip is not None
        env = await self._resolve_env(self.ip)
        if env is None:
            return None
        cwd = Path(self.container.get("workingDir") or self.host.cwd)
        run: Path | None = None
        started = now()
        output_from = processes.output_size(self.log_path)
        try:
            if self.image is None:
                argv = processes.resolve_command(podenv.container_argv(self.container, env), env)
                self.running = await processes.spawn(argv, env=env, cwd=cwd, log_path=self.log_path)
            else:
                run = imagerun.run_dir(self.log_path.parent, self.observation.container, restarts)
                self.running = await self._spawn_in_image(self.image, env, self._binds, run)
        except (OSError, imageconfig.UserError) as error:
            self._publish(restart_count=restarts)
            return Terminated(128, "StartError", started, now(), message=str(error))
        self._publish(
            state=Running(started),
            phase="Running",
            ready=False,
            restart_count=restarts,
            container_id=f"local://{self.running.pgid}",
        )
        try:
            ended = await self._supervise(self.running, env, cwd, started)
        finally:
            if run is not None and self.running is None:
                imagerun.remove_run(run)
        if ended is None:
            return None
        limit = podstatus.FALLBACK_LOG_BYTES
        tail = processes.output_tail(self.log_path, since=output_from, limit=limit)
        policy = self.container.get("terminationMessagePolicy") or "File"
        return podstatus.with_termination_message(ended, policy=policy, output_tail=tail)

    async def _spawn_in_image(
        self, image: LocalImage, env: dict[str, str], binds: list[volumes.Bind], run: Path
    ) -> processes.Running:
        """Start the container inside its image, as the image's (or the pod's) user."""
        assert self.ip is not None
        launch = imageconfig.merge_image_config(
            image.config,
            self.container,
            pod_env=env,
            pod_spec=self.pod.get("spec") or {},
            passwd=image.passwd,
            group=image.group,
        )
        kubeconfig = self._kubeconfig
        if kubeconfig is not None and env.get("KUBECONFIG") == str(kubeconfig):
            # Readable by the container's user only, at the same path inside as outside.
            os.chown(kubeconfig, launch.uid, launch.gid)
            binds = [*binds, volumes.Bind(kubeconfig.parent, str(kubeconfig.parent), True)]
        place = imagerun.RunPlace(self.log_path.parent, run, self.name, self.ip)
        return await imagerun.spawn_in_image(image, launch, binds, place, log_path=self.log_path)

    async def _find_image(self) -> LocalImage | None:
        """The container's image where the kubelet runs images and has it; an Event says which
        way the container runs (none when the kubelet runs no images, as before)."""
        store = self.host.images
        if not (self.host.images_for_every_pod or asks_for_image(self.pod)):
            return None
        reference = str(self.container.get("image") or "")
        container = self.observation.container
        reason = store.unusable()
        image = None
        if reason is None:
            try:
                image = await store.find(reference)
            except (OSError, ValueError) as error:
                reason = f"image {reference} could not be used: {error}"
            else:
                if image is None:
                    reason = f"image {reference} is not in local image storage"
        if image is None:
            await self._event(
                "LocalProcess", f"{reason}: running the container's command on the host"
            )
            return None
        await self._event(
            "Pulled",
            f'Container image "{reference}" already present on machine: running container '
            f"{container} from image {image.reference} ({image.digest})",
        )
        return image

    async def _event(self, reason: str, message: str, *, kind: str = "Normal") -> None:
        """Post an Event about the container, or count it into the same Event posted before,
        as the kubelet's recorder does (:mod:`agentpool.local.kubelet.recorder`)."""
        key = recorder.EventKey(kind, reason, message, self.observation.container)
        async with self._posting:
            at = now()
            posting = self._events.record(key, at.timestamp())
            if posting is None:
                return
            stamp = format_stamp(at)
            try:
                if posting.name is not None and await self.host.api.repeat_event(
                    self.namespace, posting.name, count=posting.count, at=stamp
                ):
                    return
                name = await self.host.api.create_event(
                    self.pod,
                    reason=reason,
                    message=message,
                    node=self.host.node_name,
                    at=stamp,
                    container=self.observation.container,
                    kind=kind,
                    first=format_stamp(datetime.fromtimestamp(posting.first, UTC)),
                    count=posting.count,
                )
            except aiohttp.ClientError as error:
                logger.warning("event on pod %s/%s: %s", self.namespace, self.name, error)
                name = None
            self._events.sent(key, name)

    async def _resolve_env(self, ip: str) -> dict[str, str] | None:
        """The container's env (over the image's, when it runs from one), waiting while a Secret
        or ConfigMap it needs is missing; in an image, its volumes are written too (``_binds``)."""
        base = self.host.base_env
        if self.image is not None:
            base = imageconfig.image_env(self.image.config)
        while not self.deleting.is_set():
            try:
                env = await podenv.container_env(
                    self.container, self.pod, base=base, pod_ip=ip, fetch=self.host.api.read
                )
                env = {**env, **await self._credentials()}
                self._binds = [] if self.image is None else await self._volumes(ip)
                return env
            except podenv.EnvError as error:
                self._publish(state=Waiting("CreateContainerConfigError", str(error)))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.deleting.wait(), timeout=self.host.backoff_initial)
        return None

    async def _volumes(self, ip: str) -> list[volumes.Bind]:
        identity = volumes.PodIdentity(self.pod, ip, self._token, self.host.access.ca_pem or b"")
        try:
            return await volumes.prepare(
                self.pod,
                self.container,
                pod_dir=self.log_path.parent,
                fetch=self.host.api.read,
                identity=identity,
            )
        except OSError as error:
            # A volume that cannot be written (a subPath where a file is, no space) waits and is
            # tried again, as a Secret that is missing does.
            raise podenv.EnvError(f"volumes: {error}") from error

    async def _credentials(self) -> dict[str, str]:
        """Where the pod mounts a service-account token: one from the API server, in a kubeconfig
        that ``KUBECONFIG`` names, since a process has no mount at the usual path. Clients that
        try the in-cluster config first (the kubernetes client, kopf) find no
        ``KUBERNETES_SERVICE_HOST`` and read it."""
        seconds = podenv.projected_token_seconds(self.pod, self.container)
        if seconds is None:
            return {}
        account = (self.pod.get("spec") or {}).get("serviceAccountName") or "default"
        try:
            token = await self.host.api.request_token(
                self.namespace, account, pod=self.name, uid=self.uid, seconds=seconds
            )
        except aiohttp.ClientResponseError as error:
            raise podenv.EnvError(
                f"service account {account!r}: no token could be had ({error.status})"
            ) from error
        if token is None:
            raise podenv.EnvError(f'serviceaccount "{account}" not found')
        self._token = token
        access = ApiAccess(self.host.access.server, self.host.access.ca_pem, token)
        path = self.log_path.parent / "serviceaccount" / "kubeconfig"
        write_kubeconfig(path, access, namespace=self.namespace)
        self._kubeconfig = path
        return {"KUBECONFIG": str(path)}

    async def _supervise(
        self, running: processes.Running, env: Mapping[str, str], cwd: Path, started: datetime
    ) -> Terminated | None:
        spec = self.container
        live_failed = asyncio.Event()
        tasks = []
        if spec.get("readinessProbe"):
            readiness = probes.ProbeSpec.parse(spec["readinessProbe"])
            tasks.append(asyncio.create_task(self._probe(readiness, env, cwd, ready=True)))
        else:
            self._publish(ready=True)
        if spec.get("livenessProbe"):
            liveness = probes.ProbeSpec.parse(spec["livenessProbe"])
            tasks.append(asyncio.create_task(self._probe(liveness, env, cwd, failed=live_failed)))
        exited = asyncio.create_task(running.process.wait())
        deleting = asyncio.create_task(self.deleting.wait())
        unhealthy = asyncio.create_task(live_failed.wait())
        waiters = {exited, deleting, unhealthy}
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in [*tasks, deleting, unhealthy]:
                task.cancel()
            await asyncio.gather(*tasks, deleting, unhealthy, return_exceptions=True)
        self._publish(ready=False)
        if exited.done():
            code = podstatus.exit_code_of(exited.result())
            # The main process ended: like a container, the rest of its group goes with it.
            processes.signal_group(running.pgid, signal.SIGKILL)
            self.running = None
            return Terminated(code, podstatus.terminated_reason(code), started, now())
        if self.deleting.is_set():
            await processes.terminate_group(running, self._grace())
            self.running = None
            return None
        code = podstatus.exit_code_of(await processes.terminate_group(running, self._grace()))
        self.running = None
        return Terminated(
            code, "Error", started, now(), message="Container failed liveness probe, restarted"
        )

    async def _probe(
        self,
        spec: probes.ProbeSpec,
        env: Mapping[str, str],
        cwd: Path,
        *,
        ready: bool = False,
        failed: asyncio.Event | None = None,
    ) -> None:
        """Run one probe on its schedule; readiness publishes, liveness sets ``failed``."""

        def changed(state: bool) -> bool:
            if ready:
                self._publish(ready=state)
            elif failed is not None and not state:
                failed.set()
                return True
            return False

        name = "Readiness" if ready else "Liveness"
        attempt = functools.partial(self._attempt, spec, env, cwd, name=name)
        await probes.probe_on_schedule(spec, attempt, changed, initial=failed is not None)

    async def _attempt(
        self, spec: probes.ProbeSpec, env: Mapping[str, str], cwd: Path, *, name: str
    ) -> probes.ProbeResult:
        """One attempt of ``spec`` (the ``name`` probe) against this pod's address; a failure
        is a Warning Event Unhealthy with the probe's words, as a real kubelet posts on every
        failed attempt, from the container's start on (repeats count into one Event)."""
        assert self.ip is not None
        session, container = self.host.probe_session, self.container
        result = await probes.run_probe(
            spec, pod_ip=self.ip, container=container, session=session, env=env, cwd=cwd
        )
        if not result.ok:
            self._post_unhealthy(f"{name} probe failed: {result.message}")
        return result

    def _post_unhealthy(self, message: str) -> None:
        """Post the Unhealthy Event in the background, as a kubelet's recorder does: the probe
        goes on at once, and while a few posts still wait on the API server, a new one is
        dropped (the next failure says the same) rather than queued without bound."""
        if len(self._posts) >= MAX_PENDING_EVENTS:
            return
        post = asyncio.create_task(self._event(podstatus.UNHEALTHY, message, kind="Warning"))
        self._posts.add(post)
        post.add_done_callback(self._posts.discard)

    def _grace(self) -> float:
        """The deletion's grace period, else the pod's terminationGracePeriodSeconds.

        A server that holds the pod only through our finalizer records 0 (finalizers carry no
        grace), so 0 counts as unset: a deletion that really wanted no grace (``--force``) removes
        the pod from a real API server without waiting for any kubelet.
        """
        metadata = self.pod.get("metadata") or {}
        value = metadata.get("deletionGracePeriodSeconds") or None
        if value is None:
            value = (self.pod.get("spec") or {}).get("terminationGracePeriodSeconds")
        return DEFAULT_GRACE if value is None else float(value)

    async def _bind(self) -> bool:
        annotations = {LOG_PATH_ANNOTATION: str(self.log_path)}
        for attempt in range(5):
            try:
                return await self.host.api.bind(
                    self.namespace,
                    self.name,
                    node=self.host.node_name,
                    annotations=annotations,
                    finalizers=[*finalizers_of(self.pod), FINALIZER],
                )
            except aiohttp.ClientError as error:
                logger.warning("binding pod %s/%s failed: %s", self.namespace, self.name, error)
                await asyncio.sleep(0.2 * (attempt + 1))
        return False

    async def _remove(self) -> None:
        if self.running is not None:
            await processes.terminate_group(self.running, self._grace())
            self.running = None
        if not self.gone:
            try:
                await release(self.host.api, self.pod)
            except aiohttp.ClientError as error:
                logger.warning("removing pod %s/%s failed: %s", self.namespace, self.name, error)
        if self.ip is not None:
            self.host.addresses.release(self.ip)
            self.ip = None

    # Status.

    def _publish(self, **changes: Any) -> None:
        self.observation = dataclasses.replace(self.observation, **changes)
        self._changed.set()

    async def _report(self) -> None:
        """Patch the status whenever the observation changed, folding bursts into one patch."""
        while True:
            await self._changed.wait()
            self._changed.clear()
            status = podstatus.render_status(self.observation, previous=self._reported, now=now())
            if status == self._reported:
                continue
            try:
                if not await self.host.api.patch_status(self.namespace, self.name, status):
                    return
            except aiohttp.ClientError as error:
                logger.warning("status of pod %s/%s: %s", self.namespace, self.name, error)
                await asyncio.sleep(0.5)
                self._changed.set()
                continue
            self._reported = status
