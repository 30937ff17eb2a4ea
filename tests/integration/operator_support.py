"""What the operator tests share: the operator as its own process, and a small typed API client.

The operator runs as ``agentpool run`` in a subprocess against a local cluster started without
one, so tests can SIGKILL and restart it as a crash would. Tests talk to the cluster through the
kubernetes client, as a user's program would, and read agents' processes from /proc to kill them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes

from agentpool.local.kubelet.processes import pod_processes

GROUP, VERSION = "agentpool.dev", "v1alpha1"
#: The gateway of an operator a test starts: on loopback, on any free port (the ConfigMap of each
#: namespace with a pool says which).
LOOPBACK_GATEWAY = ("--gateway-host", "127.0.0.1", "--gateway-port", "0")
REPO = Path(__file__).resolve().parents[2]


def agent_command(agent: str) -> list[str]:
    """The command of an example agent, as a pod template gives it (relative to the repo root,
    the working directory of the local kubelet and of the operator image)."""
    return ["python", "-m", "agentpool.agent", f"examples/agents/{agent}.py:agent"]


def pool_spec(
    agent: str = "echo", *, env: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "agent", "command": agent_command(agent)}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return {"image": "agentpool:0.1.0", "template": {"spec": {"containers": [container]}}, **spec}


def gated_pool(**spec: Any) -> dict[str, Any]:
    """A pool of ``tests/integration/agents/gated.py``, whose items wait for a file."""
    command = ["python", "-m", "agentpool.agent", "tests/integration/agents/gated.py:agent"]
    template = {"spec": {"containers": [{"name": "agent", "command": command}]}}
    return {"image": "agentpool:0.1.0", "template": template, **spec}


class OperatorProcess:
    """``agentpool run`` against a cluster, in its own process; ``connection`` is its arguments
    that say where (``--server URL``, or ``--kubeconfig PATH --context NAME``)."""

    def __init__(
        self,
        connection: Sequence[str],
        log_path: Path,
        *,
        metrics_port: int = 0,
        env: dict[str, str] | None = None,
        state_dir: Path | None = None,
    ) -> None:
        self.connection = list(connection)
        self.log_path = log_path
        # The runs' journals, in a directory that outlives a killed operator, as an emptyDir
        # outlives a restarted container: the pod's own.
        self.state_dir = state_dir or log_path.parent / "operator-state"
        self.metrics_port = metrics_port
        # Set in its environment besides the test's own (a replica's POD_ID, say).
        self.env = env or {}
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [sys.executable, "-m", "agentpool", "run", *self.connection, *LOOPBACK_GATEWAY]
        argv += ["--state-dir", str(self.state_dir)]
        if self.metrics_port:
            argv += ["--metrics-port", str(self.metrics_port)]
        log = self.log_path.open("ab")
        env = {**os.environ, **self.env}
        self.process = subprocess.Popen(
            argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env
        )
        log.close()

    def kill(self) -> None:
        """SIGKILL, as a crash or an evicted pod would end it."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    @property
    def state_dirs(self) -> list[Path]:
        return [self.state_dir]


class Replica(OperatorProcess):
    """A replica of the operators sharing the pools as ``group`` (``agentpool run --share``),
    known by the name it is given (its ``POD_ID``, as the chart sets it)."""

    def __init__(
        self, connection: Sequence[str], directory: Path, identity: str, group: str = "agentpool"
    ) -> None:
        super().__init__(
            [*connection, "--share", group],
            directory / f"{identity}.log",
            env={"POD_ID": identity},
            # Each its own, as each pod has its own emptyDir: a run that moves after a crash
            # finds no journal where it goes.
            state_dir=directory / f"{identity}-state",
        )
        self.identity = identity


class OperatorReplicas:
    """Replicas sharing the pools, which a test starts, kills and stops together as it would the
    operator: what a test asserts of one operator holds of them together."""

    def __init__(
        self,
        connection: Sequence[str],
        directory: Path,
        count: int,
        renewals: Callable[[], dict[str, float]],
    ) -> None:
        self.replicas = [Replica(connection, directory, f"replica-{n}") for n in range(count)]
        self.log_path = self.replicas[0].log_path
        self.state_dirs = [replica.state_dir for replica in self.replicas]
        self._renewals = renewals

    def start(self) -> None:
        """Start every replica, and return once each has renewed its Lease: a replica that
        joined later would take its share of the pools from the others mid-test."""
        started = time.time()
        for replica in self.replicas:
            replica.start()
        deadline = time.monotonic() + 120
        while not all(
            self._renewals().get(replica.identity, 0.0) >= started for replica in self.replicas
        ):
            if time.monotonic() > deadline:
                raise AssertionError("the replicas did not all renew their Leases within 120 s")
            time.sleep(0.1)

    def kill(self) -> None:
        for replica in self.replicas:
            replica.kill()

    def stop(self) -> None:
        # All at once: one by one, each would first hand its pools to those still running.
        running = [r.process for r in self.replicas if r.process and r.process.poll() is None]
        for process in running:
            process.send_signal(signal.SIGTERM)
        for process in running:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)

    def log(self) -> str:
        return "".join(replica.log() for replica in self.replicas)


@dataclass
class ReplicaCluster:
    """A cluster where a test starts replicas of its own, sharing the pools as ``group`` and
    serving the namespaces it makes with :meth:`new_namespace` (and, on a real cluster, only
    those: the package's operator serves others there)."""

    api: Api
    connection: list[str]
    group: str
    prefix: str
    dir: Path

    def replica(self, identity: str) -> Replica:
        return Replica(self.connection, self.dir, identity, self.group)

    def new_namespace(self) -> str:
        return self.api.new_namespace(self.prefix)

    def lease_name(self, identity: str) -> str:
        return f"{self.group}-{identity}"


class Api:
    """The calls the tests make, through the official kubernetes client."""

    def __init__(self, client: kubernetes.client.ApiClient) -> None:
        self.client = client
        self.core = kubernetes.client.CoreV1Api(client)
        self.custom = kubernetes.client.CustomObjectsApi(client)

    def new_namespace(self, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.core.create_namespace({"metadata": {"name": name}})
        return name

    def create(
        self, plural: str, namespace: str, name: str, spec: dict[str, Any]
    ) -> dict[str, Any]:
        kind = {"agentpools": "AgentPool", "poolruns": "PoolRun", "agentleases": "AgentLease"}
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": kind[plural],
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
        obj: dict[str, Any] = self.custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, plural, body
        )
        return obj

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        obj: dict[str, Any] = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, plural, name
        )
        return obj

    def status(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        return dict(self.get(plural, namespace, name).get("status") or {})

    def patch_spec(self, plural: str, namespace: str, name: str, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            plural,
            name,
            {"spec": spec},
            _content_type="application/merge-patch+json",
        )

    def delete(self, plural: str, namespace: str, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)

    def exists(self, plural: str, namespace: str, name: str) -> bool:
        try:
            self.get(plural, namespace, name)
        except kubernetes.client.exceptions.ApiException as error:
            if error.status == 404:
                return False
            raise
        return True

    def pods(self, namespace: str, pool: str) -> list[dict[str, Any]]:
        pods = self.core.list_namespaced_pod(namespace, label_selector=f"agentpool.dev/pool={pool}")
        return [self.client.sanitize_for_serialization(pod) for pod in pods.items]

    def live_pods(self, namespace: str, pool: str) -> list[dict[str, Any]]:
        return [p for p in self.pods(namespace, pool) if not p["metadata"].get("deletionTimestamp")]

    def events(self, namespace: str) -> list[dict[str, Any]]:
        events = self.core.list_namespaced_event(namespace)
        return [self.client.sanitize_for_serialization(event) for event in events.items]

    def event_reasons(self, namespace: str) -> list[str]:
        return [str(event.get("reason")) for event in self.events(namespace)]


def agent_pids(pod_ip: str) -> list[int]:
    """The processes the local kubelet started for the pod with this IP."""
    return pod_processes(pod_ip)


def kill_agent(pod: dict[str, Any]) -> None:
    """SIGKILL the agent's processes, as an out-of-memory kill or a crash would."""
    pids = agent_pids(pod["status"]["podIP"])
    assert pids, f"no process found for pod {pod['metadata']['name']}"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)


def ready(pod: dict[str, Any]) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def now() -> float:
    return time.monotonic()


def lease_renewals(client: kubernetes.client.ApiClient, group: str) -> dict[str, float]:
    """When each replica of ``group`` last renewed its Lease (epoch seconds), by holder."""
    coordination = kubernetes.client.CoordinationV1Api(client)
    leases = coordination.list_namespaced_lease(
        "default", label_selector=f"agentpool.dev/share={group}"
    )
    return {
        lease.spec.holder_identity: lease.spec.renew_time.timestamp()
        for lease in leases.items
        if lease.spec.holder_identity and lease.spec.renew_time
    }
