"""Scenarios of the operator, each run once, for the metrics and RBAC tests to judge.

The operator runs as ``agentpool run --all-namespaces --standalone`` (the chart's default flags),
or with ``--namespace`` as the chart runs it for ``watchNamespaces``, in its own process, against
a local cluster started without one, through a :class:`RecordingProxy` so every request it makes
is recorded as RBAC sees it. The full scenario walks the paths a user's cluster would: a run from
a ConfigMap through an echo pool that overflows, outputs large enough to go to a result ConfigMap,
a call, a cast and a refused call through the gateway (whose certificate Secret the operator
finds stale and renews), a retried item in a run deleted by its TTL, a run that deadlocks on a
pool that never becomes Ready, a lease bound and deleted, one that expires carrying the finalizer
an earlier operator put on leases, a scale-down, and deleting the pools.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from cluster import ClusterThread, wait_for
from ship.proxy import Access, RecordingProxy

REPO = Path(__file__).resolve().parents[2]
GROUP, VERSION = "agentpool.dev", "v1alpha1"
NAMESPACE = "ship"
ITEMS = 20
BIG_OUTPUT_CHARS = 6000
KINDS = {"agentpools": "AgentPool", "poolruns": "PoolRun", "agentleases": "AgentLease"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def agent_template(agent: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod template running one of the example agents from the repository's root."""
    container: dict[str, Any] = {
        "name": "agent",
        "command": ["python", "-m", "agentpool.agent", f"examples/agents/{agent}.py:agent"],
    }
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    # Agents here hold no work worth draining for: a short grace ends the scenario sooner.
    return {"spec": {"terminationGracePeriodSeconds": 1, "containers": [container]}}


@dataclass
class Outcome:
    """What the scenario observed, for the tests to judge."""

    metrics: dict[str, list[Sample]] = field(default_factory=dict)
    accesses: dict[Access, int] = field(default_factory=dict)
    user_agents: dict[str, int] = field(default_factory=dict)
    server_counts: dict[tuple[str, str], int] = field(default_factory=dict)
    main_run: dict[str, Any] = field(default_factory=dict)
    stuck_run: dict[str, Any] = field(default_factory=dict)
    pool: dict[str, Any] = field(default_factory=dict)
    gateway: dict[str, int] = field(default_factory=dict)
    operator_log: str = ""

    def samples(self, name: str, **labels: str) -> list[Sample]:
        """Samples named ``name`` (a sample name, e.g. ``..._count``) whose labels include these."""
        return [
            sample
            for family in self.metrics.values()
            for sample in family
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
        ]

    def total(self, name: str, **labels: str) -> float:
        return sum(sample.value for sample in self.samples(name, **labels))


def read_metrics(port: int) -> dict[str, list[Sample]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {family.name: list(family.samples) for family in text_string_to_metric_families(text)}


class Objects:
    """The scenario's calls, through the kubernetes client, in its namespace."""

    def __init__(self, client: kubernetes.client.ApiClient, *, token: str = "") -> None:
        self.core = kubernetes.client.CoreV1Api(client)
        self.custom = kubernetes.client.CustomObjectsApi(client)
        self.token = token

    def create(
        self, plural: str, name: str, spec: dict[str, Any], *, finalizers: tuple[str, ...] = ()
    ) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KINDS[plural],
            "metadata": {"name": name, "finalizers": list(finalizers)},
            "spec": spec,
        }
        self.custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, plural, body)

    def get(self, plural: str, name: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, NAMESPACE, plural, name
            )
        except kubernetes.client.exceptions.ApiException as error:
            if error.status == 404:
                return None
            raise
        return obj

    def status(self, plural: str, name: str) -> dict[str, Any]:
        return dict((self.get(plural, name) or {}).get("status") or {})

    def patch_spec(self, plural: str, name: str, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            NAMESPACE,
            plural,
            name,
            {"spec": spec},
            _content_type="application/merge-patch+json",
        )

    def delete(self, plural: str, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, plural, name)

    def finished(self, name: str) -> dict[str, Any] | None:
        status = self.status("poolruns", name)
        return status if status.get("phase") in ("Succeeded", "Failed") else None


def _items() -> list[dict[str, Any]]:
    # Echoed back, the first and last outputs are too large for status: they go to a ConfigMap the
    # run owns, written once when the first arrives and again, a few status writes later, with
    # the last.
    big = "x" * BIG_OUTPUT_CHARS
    items: list[dict[str, Any]] = [{"id": "big-first", "text": big}]
    items += [{"id": f"item-{n:02d}", "n": n} for n in range(ITEMS - 2)]
    items.append({"id": "big-last", "text": big})
    return items


def drive_everything(
    objects: Objects, metrics_port: int, outcome: Outcome, log: Callable[[], str]
) -> None:
    """Walk the whole scenario; each wait has a deadline and names what it waited for."""
    objects.core.create_namespace({"metadata": {"name": NAMESPACE}})
    objects.core.create_namespaced_config_map(
        NAMESPACE,
        {"metadata": {"name": "items"}, "data": {"items.json": json.dumps(_items())}},
    )
    objects.create(
        "agentpools",
        "echo",
        {"minSize": 2, "maxSize": 3, "idleTimeoutSeconds": 1, "template": agent_template("echo")},
    )
    objects.create(
        "poolruns",
        "main",
        {
            "poolRef": {"name": "echo"},
            "source": {"configMapRef": {"name": "items", "key": "items.json"}},
            "itemId": "id",
            "cap": 3,
        },
    )
    outcome.main_run = wait_for(
        lambda: objects.finished("main"), 90, message=f"run main to finish\n{log()[-3000:]}"
    )
    outcome.gateway = call_through_the_gateway(objects, "echo")

    objects.create("agentpools", "flaky", {"minSize": 1, "template": agent_template("flaky")})
    objects.create(
        "poolruns",
        "retried",
        {
            "poolRef": {"name": "flaky"},
            "source": {"items": [{"id": "once", "failTimes": 1}]},
            "itemId": "id",
            "maxAttempts": 2,
            "backoffSeconds": 0,
            "ttlSecondsAfterFinished": 0,
        },
    )
    wait_for(
        lambda: objects.get("poolruns", "retried") is None,
        60,
        message="run retried to be deleted by its TTL",
    )

    cold = agent_template("slow_start", {"SLOW_START_SECONDS": "inf"})
    # Never Ready: past its (short) deadline, the pool lists the Unhealthy Events of its agent.
    objects.create(
        "agentpools", "cold", {"minSize": 1, "template": cold, "progressDeadlineSeconds": 5}
    )
    objects.create(
        "poolruns",
        "stuck",
        {"poolRef": {"name": "cold"}, "source": {"items": [1]}, "checkoutTimeoutSeconds": 1},
    )
    outcome.stuck_run = wait_for(lambda: objects.finished("stuck"), 60, message="run stuck to end")
    wait_for(
        lambda: "probe failed" in _degraded_message(objects, "cold"),
        60,
        message="pool cold to repeat its agent's probe error from the Unhealthy Events",
    )

    objects.create("agentleases", "chat", {"poolRef": {"name": "echo"}, "ttlSeconds": 60})
    wait_for(
        lambda: objects.status("agentleases", "chat").get("phase") == "Bound",
        30,
        message="lease chat to be bound",
    )
    objects.delete("agentleases", "chat")
    wait_for(lambda: objects.get("agentleases", "chat") is None, 30, message="lease chat gone")
    # A lease that runs out its ttl has its token Secret deleted; one that carries the finalizer
    # an earlier operator put on leases has it taken off, so its deletion is not held forever.
    objects.create(
        "agentleases",
        "brief",
        {"poolRef": {"name": "echo"}, "ttlSeconds": 1},
        finalizers=(f"{GROUP}/finalizer",),
    )
    wait_for(
        lambda: objects.status("agentleases", "brief").get("phase") == "Expired",
        30,
        message="lease brief to expire",
    )
    objects.delete("agentleases", "brief")
    wait_for(lambda: objects.get("agentleases", "brief") is None, 30, message="lease brief gone")

    objects.patch_spec("agentpools", "echo", {"minSize": 1, "maxSize": 1})

    def settled() -> dict[str, Any] | None:
        status = objects.status("agentpools", "echo")
        if status.get("replicas") != 1 or status.get("readyReplicas") != 1 or status.get("busy"):
            return None
        metrics = read_metrics(metrics_port)
        agents = [s for s in metrics["agentpool_agents"] if s.labels.get("pool") == "echo"]
        counted = sum(s.value for s in agents)
        return status if counted == status["replicas"] else None

    outcome.pool = wait_for(settled, 60, message="pool echo to settle at one agent")
    outcome.metrics = read_metrics(metrics_port)

    for pool in ("echo", "flaky", "cold"):
        objects.delete("agentpools", pool)
    for pool in ("echo", "flaky", "cold"):
        wait_for(
            lambda name=pool: objects.get("agentpools", name) is None,  # type: ignore[misc]
            60,
            message=f"pool {pool} deleted\n{log()[-3000:]}",
        )


def _degraded_message(objects: Objects, pool: str) -> str:
    conditions = objects.status("agentpools", pool).get("conditions") or []
    return next((str(c["message"]) for c in conditions if c["type"] == "Degraded"), "")


def drive_one_run(
    objects: Objects, metrics_port: int, outcome: Outcome, log: Callable[[], str]
) -> None:
    """A pool and a short run: enough for an operator serving listed namespaces to show its
    namespace-scoped requests."""
    objects.core.create_namespace({"metadata": {"name": NAMESPACE}})
    objects.create("agentpools", "echo", {"minSize": 1, "template": agent_template("echo")})
    objects.create(
        "poolruns", "short", {"poolRef": {"name": "echo"}, "source": {"items": ["a", "b"]}}
    )
    outcome.main_run = wait_for(
        lambda: objects.finished("short"), 60, message=f"run short to finish\n{log()[-3000:]}"
    )


def call_through_the_gateway(objects: Objects, pool: str) -> dict[str, int]:
    """A call, a cast and a call with a bad token through the gateway the namespace's ConfigMap
    names: the operator reviews its callers and serves the pool; the statuses answered."""
    data = wait_for(
        lambda: objects.core.read_namespaced_config_map("agentpool-gateway", NAMESPACE).data,
        30,
        message="the gateway's ConfigMap",
    )
    url = urlsplit(data["url"])
    context = ssl.create_default_context(cadata=data["ca.crt"])
    answered = {}
    for name, verb, token in (
        ("call", "call", objects.token),
        ("cast", "cast", objects.token),
        ("refused", "call", "not-a-token"),
    ):
        connection = http.client.HTTPSConnection(
            url.hostname, url.port, context=context, timeout=60
        )
        try:
            connection.request(
                "POST",
                f"/v1/namespaces/{NAMESPACE}/agentpools/{pool}/{verb}",
                body=json.dumps({"item": {"via": name}}),
                headers={"Authorization": f"Bearer {token}"},
            )
            response = connection.getresponse()
            response.read()
            answered[name] = response.status
        finally:
            connection.close()
    return answered


def stale_gateway_certificate(client: kubernetes.client.ApiClient) -> None:
    """A certificate Secret the operator must renew (it names no host): it reads the Secret
    and writes a new certificate over it, as it would one about to expire."""
    kubernetes.client.CoreV1Api(client).create_namespaced_secret(
        "default",
        {
            "metadata": {"name": "agentpool-gateway-tls"},
            "type": "kubernetes.io/tls",
            "data": {"tls.crt": "", "tls.key": ""},
        },
    )


Drive = Callable[[Objects, int, Outcome, Callable[[], str]], None]


def run_scenario(
    directory: Path,
    *,
    scope: Sequence[str] = ("--all-namespaces",),
    drive: Drive = drive_everything,
) -> Outcome:
    """Start the cluster, the proxy and the operator (serving ``scope``), drive the scenario,
    and stop them all."""
    # Agent commands name example files relative to the repository, wherever pytest runs from.
    cluster = ClusterThread(directory, kubelet={"cwd": REPO})
    handle = cluster.start()
    proxy = RecordingProxy(handle.access)
    cluster.call(proxy.start)
    metrics_port = free_port()
    log_path = directory / "operator.log"
    outcome = Outcome()
    setup = handle.api_client()
    try:
        stale_gateway_certificate(setup)
    finally:
        setup.close()
    try:
        with log_path.open("wb") as log_file:
            operator = subprocess.Popen(
                [
                    *(sys.executable, "-m", "agentpool", "run", *scope),
                    *("--standalone", "--kubeconfig", str(handle.kubeconfig)),
                    *("--server", proxy.url, "--metrics-port", str(metrics_port)),
                    *("--gateway-host", "127.0.0.1", "--gateway-port", "0"),
                ],
                cwd=REPO,
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        try:
            client = handle.api_client()
            try:
                objects = Objects(client, token=handle.access.token or "")
                drive(objects, metrics_port, outcome, lambda: log_path.read_text())
            finally:
                client.close()
        finally:
            operator.terminate()
            try:
                operator.wait(30)
            except subprocess.TimeoutExpired:
                operator.kill()
                operator.wait(10)
        outcome.accesses = dict(proxy.accesses)
        outcome.user_agents = dict(proxy.user_agents)
        outcome.server_counts = cluster.counts()
    finally:
        outcome.operator_log = log_path.read_text(errors="replace") if log_path.exists() else ""
        cluster.call(proxy.stop)
        cluster.stop()
    return outcome
