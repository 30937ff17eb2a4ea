"""What every scenario of ``python -m bench`` stands on: the cluster, the operator, a small client.

Each scenario starts a fresh local cluster (``agentpool local up --no-operator``, in its own
process, as a real API server would be) and the operator as ``agentpool run`` in another process,
so the operator's memory can be read from ``/proc`` and its CPU is its own. The bench talks to the
API server with :class:`Kube`, a few aiohttp calls that count themselves, so the scenarios can
tell the operator's requests from their own in the API server's ``/debug/counts``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from agentpool.local.kubeconfig import ApiAccess
from agentpool.pool.manifests import TOKEN_KEY, token_secret_name

ROOT = Path(__file__).resolve().parents[1]
GROUP, VERSION = "agentpool.dev", "v1alpha1"
KINDS = {"agentpools": "AgentPool", "poolruns": "PoolRun", "agentleases": "AgentLease"}
READS = {"get", "list"}
WRITES = {"create", "update", "patch", "delete", "deletecollection"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def agent_command(path: Path) -> list[str]:
    """The pod command that serves the agent defined at ``path`` (``python -m agentpool.agent``)."""
    return ["python", "-m", "agentpool.agent", f"{path}:agent"]


def pool_spec(path: Path, *, env: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """An AgentPool spec whose pods run the agent at ``path`` with ``env``. Its agents all
    start at once unless ``maxUnready`` says otherwise: the benchmarks measure a full pool's
    start, as they did before the bound existed."""
    spec.setdefault("maxUnready", max(1, spec.get("minSize", 1), spec.get("maxSize") or 0))
    container: dict[str, Any] = {"name": "agent", "command": agent_command(path)}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return {"image": "agentpool:0.1.0", "template": {"spec": {"containers": [container]}}, **spec}


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0..100) by nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


async def until(
    check: Callable[[], Awaitable[Any]], *, timeout: float, what: str, interval: float = 0.01
) -> Any:
    """Await ``check`` until it returns something truthy, and return it; fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:g}s for {what}")
        await asyncio.sleep(interval)


def terminate(process: subprocess.Popen[bytes] | None, *, grace: float) -> None:
    """SIGTERM a child that still runs, and SIGKILL it if it outlives ``grace`` seconds."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


class ClusterProcess:
    """``agentpool local up --no-operator`` in a process of its own, under ``directory``;
    ``command`` runs another program that takes ``--dir`` and says where it is up as it does."""

    def __init__(
        self,
        directory: Path,
        *,
        options: tuple[str, ...] = (),
        command: tuple[str, ...] = ("-m", "agentpool", "local", "up", "--no-operator"),
    ) -> None:
        self.directory = directory
        self.options = options
        self.command = command
        self.kubeconfig = directory / "kubeconfig"
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self, timeout: float = 60) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        log = self.directory / "cluster.log"
        argv = [sys.executable, *self.command, "--dir", str(self.directory), *self.options]
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                argv,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            match = re.search(r"local cluster up at (https?://\S+)", log.read_text())
            if match:
                self.url = match.group(1)
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"the local cluster did not start:\n{log.read_text()[-2000:]}")

    def stop(self) -> None:
        terminate(self.process, grace=60)


class OperatorProcess:
    """``agentpool run --kubeconfig K`` in a process of its own; its memory is read from /proc."""

    def __init__(
        self, kubeconfig: Path, log_path: Path, *, metrics_port: int = 0, args: tuple[str, ...] = ()
    ) -> None:
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.metrics_port = metrics_port
        self.args = args
        self.health_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> None:
        argv = [sys.executable, "-m", "agentpool", "run", "--kubeconfig", str(self.kubeconfig)]
        argv += ["--gateway-host", "127.0.0.1", "--gateway-port", "0"]
        # The runs' journals, in a directory that outlives a killed operator, as an emptyDir does.
        argv += ["--state-dir", str(self.log_path.parent / "operator-state")]
        if self.metrics_port:
            argv += ["--metrics-port", str(self.metrics_port)]
        argv += ["--liveness", f"http://127.0.0.1:{self.health_port}/healthz", *self.args]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)

    async def wait_ready(self, session: aiohttp.ClientSession, timeout: float = 60) -> None:
        """Until the operator answers its liveness probe: started, logged in, its probes run.

        A scenario that times from creating a resource must not time the operator's start too.
        """
        url = f"http://127.0.0.1:{self.health_port}/healthz"

        async def answered() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"the operator exited ({self.process.returncode})")
            try:
                async with session.get(url) as response:
                    return response.status == 200
            except aiohttp.ClientError:
                return False

        await until(answered, timeout=timeout, what="the operator's liveness probe", interval=0.05)

    def memory_kib(self, field: str) -> int:
        """A ``/proc/PID/status`` figure in KiB: ``VmHWM`` (peak resident) or ``VmRSS``."""
        text = Path(f"/proc/{self.pid}/status").read_text()
        match = re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE)
        return int(match.group(1)) if match else 0

    def cpu_seconds(self) -> float:
        """User and system CPU time the operator has used so far (``/proc/PID/stat``)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        terminate(self.process, grace=30)


class Kube:
    """The API calls the scenarios make, counting each by verb so they can be told apart; over
    a session of its own that trusts the cluster's CA and sends its token (``close()`` it)."""

    def __init__(self, access: ApiAccess) -> None:
        self.server = access.server
        context = access.ssl_context()
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=64, ssl=context if context is not None else True),
            headers=access.headers(),
            trust_env=False,
        )
        self.own: Counter[str] = Counter()

    async def close(self) -> None:
        await self.session.close()

    def _custom(self, plural: str, namespace: str, name: str = "") -> str:
        base = f"{self.server}/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{plural}"
        return f"{base}/{name}" if name else base

    async def _call(self, verb: str, method: str, url: str, **kwargs: Any) -> Any:
        self.own[verb] += 1
        async with self.session.request(method, url, **kwargs) as response:
            body = await response.read()
            if response.status >= 400:
                raise RuntimeError(f"{method} {url}: {response.status} {body[:300]!r}")
            return json.loads(body) if body else None

    async def new_namespace(self, name: str) -> str:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        await self._call("create", "POST", f"{self.server}/api/v1/namespaces", json=body)
        return name

    async def delete_namespace(self, name: str) -> None:
        await self._call("delete", "DELETE", f"{self.server}/api/v1/namespaces/{name}")

    async def create(
        self, plural: str, namespace: str, name: str, spec: dict[str, Any]
    ) -> dict[str, Any]:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KINDS[plural],
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
        result: dict[str, Any] = await self._call(
            "create", "POST", self._custom(plural, namespace), json=body
        )
        return result

    async def get(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._call(
            "get", "GET", self._custom(plural, namespace, name)
        )
        return result

    async def list(self, plural: str, namespace: str) -> list[dict[str, Any]]:
        body = await self._call("list", "GET", self._custom(plural, namespace))
        items: list[dict[str, Any]] = body["items"]
        return items

    async def get_raw(self, plural: str, namespace: str, name: str) -> bytes:
        """The object exactly as the API server stores and serves it."""
        self.own["get"] += 1
        async with self.session.get(self._custom(plural, namespace, name)) as response:
            response.raise_for_status()
            return await response.read()

    async def patch(
        self, plural: str, namespace: str, name: str, spec: dict[str, Any]
    ) -> dict[str, Any]:
        """A merge patch of the object's spec; the object as the API server stored it."""
        result: dict[str, Any] = await self._call(
            "patch",
            "PATCH",
            self._custom(plural, namespace, name),
            data=json.dumps({"spec": spec}),
            headers={"Content-Type": "application/merge-patch+json"},
        )
        return result

    async def delete(self, plural: str, namespace: str, name: str) -> None:
        await self._call("delete", "DELETE", self._custom(plural, namespace, name))

    async def pods(self, namespace: str, pool: str) -> list[dict[str, Any]]:
        """The pool's pods that are not being deleted."""
        url = f"{self.server}/api/v1/namespaces/{namespace}/pods"
        params = {"labelSelector": f"agentpool.dev/pool={pool}"}
        body = await self._call("list", "GET", url, params=params)
        return [p for p in body["items"] if not p["metadata"].get("deletionTimestamp")]

    async def ready_endpoints(self, namespace: str, pool: str, port: int = 8080) -> list[str]:
        return [
            f"http://{pod['status']['podIP']}:{port}"
            for pod in await self.pods(namespace, pool)
            if is_ready(pod)
        ]

    async def token(self, namespace: str, pool: str) -> str:
        url = f"{self.server}/api/v1/namespaces/{namespace}/secrets/{token_secret_name(pool)}"
        secret = await self._call("get", "GET", url)
        return base64.b64decode(secret["data"][TOKEN_KEY]).decode()

    async def owned_secrets(self, namespace: str, kind: str) -> list[str]:
        """The names of the namespace's Secrets that an object of ``kind`` owns."""
        url = f"{self.server}/api/v1/namespaces/{namespace}/secrets"
        body = await self._call("list", "GET", url)
        return [
            secret["metadata"]["name"]
            for secret in body["items"]
            if any(o.get("kind") == kind for o in secret["metadata"].get("ownerReferences") or ())
        ]

    async def counts(self) -> Counter[tuple[str, str]]:
        """Every request the API server answered so far, by (verb, resource): the local API
        server's ``/debug/counts``, or a real one's own ``apiserver_request_total``."""
        async with self.session.get(f"{self.server}/debug/counts") as response:
            if response.status == 200:
                rows = await response.json()
                return Counter({(row["verb"], row["resource"]): row["count"] for row in rows})
        async with self.session.get(f"{self.server}/metrics") as response:
            response.raise_for_status()
            return served_requests(await response.text())

    async def crds(self, bodies: list[dict[str, Any]]) -> None:
        """Make these CustomResourceDefinitions (one made already stays as it is) and wait
        until each is Established."""
        url = f"{self.server}/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        names = [body["metadata"]["name"] for body in bodies]
        for body, name in zip(bodies, names, strict=True):
            async with self.session.post(url, json=body) as response:
                if response.status not in (201, 409):
                    raise RuntimeError(f"CRD {name}: {response.status} {await response.text()}")

        async def established() -> bool:
            for name in names:
                async with self.session.get(f"{url}/{name}") as response:
                    found = await response.json()
                if not condition(found, "Established"):
                    return False
            return True

        await until(established, timeout=60, what="the CRDs Established", interval=0.1)

    async def service_account(self, namespace: str) -> None:
        """Until the namespace's default ServiceAccount exists: a real control plane admits no
        pod before its controllers have made it."""
        url = f"{self.server}/api/v1/namespaces/{namespace}/serviceaccounts/default"

        async def made() -> bool:
            async with self.session.get(url) as response:
                return response.status == 200

        await until(made, timeout=60, what=f"namespace {namespace}'s default account", interval=0.1)

    async def watch(
        self, plural: str, namespace: str, name: str, *, timeout: float
    ) -> AsyncIterator[dict[str, Any]]:
        """The object as each change arrives, from one watch request (not a read per look)."""
        self.own["watch"] += 1
        params = {"watch": "true", "fieldSelector": f"metadata.name={name}"}
        client_timeout = aiohttp.ClientTimeout(total=timeout, sock_read=timeout)
        async with self.session.get(
            self._custom(plural, namespace), params=params, timeout=client_timeout
        ) as response:
            response.raise_for_status()
            async for line in lines(response):
                event = json.loads(line)
                if event.get("type") in ("ADDED", "MODIFIED"):
                    yield event["object"]


async def lines(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The non-empty lines of a watch stream, however long (an object may be megabytes)."""
    buffer = b""
    async for chunk in response.content.iter_any():
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer


def crd_bodies() -> list[dict[str, Any]]:
    """The project's CustomResourceDefinitions, as ``crds/`` holds them."""
    return [yaml.safe_load(path.read_text()) for path in sorted((ROOT / "crds").glob("*.yaml"))]


#: A real API server's methods as the verbs RBAC and ``/debug/counts`` name them.
VERBS = {
    "POST": "create",
    "PUT": "update",
    "PATCH": "patch",
    "APPLY": "patch",
    "DELETE": "delete",
    "DELETECOLLECTION": "deletecollection",
    "GET": "get",
    "LIST": "list",
    "WATCH": "watch",
    "CONNECT": "connect",
}
_SERVED = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<count>\S+)$", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def served_requests(metrics: str) -> Counter[tuple[str, str]]:
    """``apiserver_request_total`` of a real API server's ``/metrics``, summed by (verb,
    resource[/subresource]) as ``/debug/counts`` keys them."""
    counts: Counter[tuple[str, str]] = Counter()
    for match in _SERVED.finditer(metrics):
        labels = dict(_LABEL.findall(match.group("labels")))
        verb = VERBS.get(labels.get("verb", ""), labels.get("verb", "").lower())
        resource = labels.get("resource", "")
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        counts[(verb, resource)] += int(float(match.group("count")))
    return counts


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def condition(obj: dict[str, Any], kind: str) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def finished(run: dict[str, Any]) -> bool:
    return (run.get("status") or {}).get("phase") in ("Succeeded", "Failed")


async def wait_run(kube: Kube, namespace: str, name: str, *, timeout: float) -> dict[str, Any]:
    """Follow the run with a watch until it ends; the run as it ended."""
    async with asyncio.timeout(timeout):
        async for run in kube.watch("poolruns", namespace, name, timeout=timeout):
            if finished(run):
                return run
    raise RuntimeError(f"the watch on run {name} ended before the run did")


async def wait_pool_ready(
    kube: Kube, namespace: str, pool: str, count: int, *, timeout: float
) -> list[str]:
    """Wait until ``count`` of the pool's pods are Ready; their endpoints."""

    async def ready() -> list[str]:
        endpoints = await kube.ready_endpoints(namespace, pool)
        return endpoints if len(endpoints) >= count else []

    result: list[str] = await until(
        ready, timeout=timeout, what=f"{count} ready agents in pool {pool}", interval=0.2
    )
    return result


class Stage(contextlib.AbstractAsyncContextManager["Stage"]):
    """A fresh cluster and operator for one scenario, with a session and a :class:`Kube`."""

    def __init__(
        self,
        work: Path,
        name: str,
        *,
        metrics_port: int = 0,
        cluster: tuple[str, ...] = (),
        kubeconfig: Path | None = None,
    ) -> None:
        self.dir = work / name
        # With ``kubeconfig``, a cluster of the caller's (whose nodes run the pools' pods, as
        # the local kubelet does): only the operator is started, after the CRDs are made.
        self.kubeconfig = kubeconfig
        self.cluster = ClusterProcess(self.dir / "cluster", options=cluster)
        self.metrics_port = metrics_port
        self.operator: OperatorProcess | None = None
        self.session: aiohttp.ClientSession | None = None
        self._kube: Kube | None = None

    @property
    def kube(self) -> Kube:
        assert self._kube is not None
        return self._kube

    async def __aenter__(self) -> Stage:
        kubeconfig = self.kubeconfig or self.cluster.kubeconfig
        if self.kubeconfig is None:
            await asyncio.to_thread(self.cluster.start)
        try:
            self._kube = Kube(ApiAccess.from_kubeconfig(kubeconfig))
            if self.kubeconfig is not None:
                await self._kube.crds(crd_bodies())
            self.dir.mkdir(parents=True, exist_ok=True)
            self.operator = OperatorProcess(
                kubeconfig, self.dir / "operator.log", metrics_port=self.metrics_port
            )
            self.operator.start()
            self.session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=64), trust_env=False
            )
            await self.operator.wait_ready(self.session)
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._kube is not None:
            await self._kube.close()
        if self.session is not None:
            await self.session.close()
        if self.operator is not None:
            await asyncio.to_thread(self.operator.stop)
        if self.kubeconfig is None:
            await asyncio.to_thread(self.cluster.stop)

    @property
    def kubeconfig_path(self) -> Path:
        return self.kubeconfig or self.cluster.kubeconfig

    async def restart_operator(self, *args: str) -> None:
        """The operator stopped, and started again with ``args``: it finds its pools' agents
        where the first one left them, as after any restart."""
        assert self.operator is not None
        assert self.session is not None
        await asyncio.to_thread(self.operator.stop)
        self.operator = OperatorProcess(
            self.kubeconfig_path,
            self.dir / "operator.log",
            metrics_port=self.metrics_port,
            args=args,
        )
        self.operator.start()
        await self.operator.wait_ready(self.session)

    async def stop_operator(self) -> None:
        """No operator at all from now on: the cluster is the scenario's alone."""
        if self.operator is not None:
            await asyncio.to_thread(self.operator.stop)

    def pod_logs(self) -> list[Path]:
        return sorted((self.dir / "cluster" / "pods").rglob("*.log"))


class Watcher:
    """A watch on one kind in one namespace, noting when each object was first seen as what.

    It lists first and watches from that resourceVersion, so nothing created after
    :meth:`start` returns is missed however late the stream connects. ``seen(name, test)``
    answers with the monotonic time the object first passed ``test``.
    """

    def __init__(self, kube: Kube, path: str) -> None:
        self.kube = kube
        self.url = f"{kube.server}{path}"
        self.first: dict[str, float] = {}
        self.objects: dict[str, dict[str, Any]] = {}
        self.history: list[tuple[float, str, dict[str, Any]]] = []
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.kube.own["list"] += 1
        async with self.kube.session.get(self.url) as response:
            response.raise_for_status()
            body = await response.json()
        for obj in body.get("items") or []:
            self.objects[obj["metadata"]["name"]] = obj
        version = body["metadata"]["resourceVersion"]
        self._task = asyncio.create_task(self._follow(version))

    async def _follow(self, version: str) -> None:
        self.kube.own["watch"] += 1
        params = {"watch": "true", "resourceVersion": version, "allowWatchBookmarks": "false"}
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        async with self.kube.session.get(self.url, params=params, timeout=timeout) as response:
            response.raise_for_status()
            async for line in lines(response):
                event = json.loads(line)
                now = time.monotonic()
                obj = event.get("object") or {}
                name = (obj.get("metadata") or {}).get("name")
                if not name or event.get("type") not in ("ADDED", "MODIFIED", "DELETED"):
                    continue
                self.first.setdefault(name, now)
                self.objects[name] = obj
                self.history.append((now, str(event["type"]), obj))
                self._changed.set()

    async def wait(
        self,
        test: Callable[[str, dict[str, Any]], bool],
        *,
        timeout: float,
        what: str,
        since: float = 0.0,
        event: str | None = None,
    ) -> tuple[float, str]:
        """The first (time, name) seen at or after ``since`` whose object passes ``test``, in an
        ``event`` of that type (ADDED, MODIFIED, DELETED) when one is named."""
        deadline = time.monotonic() + timeout
        checked = 0
        while True:
            for at, kind, obj in self.history[checked:]:
                name = obj["metadata"]["name"]
                if at >= since and (event is None or kind == event) and test(name, obj):
                    return at, name
            checked = len(self.history)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"waited {timeout:g}s for {what}")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
                await self._task
