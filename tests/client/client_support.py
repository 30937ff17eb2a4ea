"""What the client tests share: pools to lease from, and an outside view of the cluster.

The tests set pools up, and check what the client did, through the official kubernetes client,
so what is observed does not pass through the code under test.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes

from cluster import ClusterHandle, wait_for
from docblocks import namespaced_kubeconfig

GROUP, VERSION = "agentpool.dev", "v1alpha1"
KINDS = {"agentpools": "AgentPool", "poolruns": "PoolRun", "agentleases": "AgentLease"}
#: The prefix of the tests' namespaces, which an operator started for a real cluster serves.
NAMESPACE_PREFIX = "c-"


def agent_command(agent: str) -> list[str]:
    """The command of an example agent, relative to the repository's root."""
    return ["python", "-m", "agentpool.agent", f"examples/agents/{agent}.py:agent"]


def pool_spec(
    agent: str = "echo", *, env: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "agent", "command": agent_command(agent)}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return {"image": "agentpool:0.1.0", "template": {"spec": {"containers": [container]}}, **spec}


#: slow_start without the slowness: items fail on ``"fail": true`` and grow by ``outputBytes``.
FAST = {"SLOW_START_SECONDS": "0", "WORK_SECONDS": "0"}


@dataclass
class ClientCluster:
    """The tests' cluster, which an operator serves."""

    handle: ClusterHandle

    def options(self, namespace: str) -> list[str]:
        """What points ``agentpool call`` or ``agentpool lease`` at this cluster and namespace."""
        options = ["--kubeconfig", str(self.handle.kubeconfig), "-n", namespace]
        if self.handle.context:
            options += ["--context", self.handle.context]
        return options


class Outside:
    """The cluster through the official kubernetes client, in one namespace."""

    def __init__(self, client: kubernetes.client.ApiClient, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self.core = kubernetes.client.CoreV1Api(client)
        self.custom = kubernetes.client.CustomObjectsApi(client)

    @classmethod
    def new_namespace(cls, client: kubernetes.client.ApiClient) -> Outside:
        name = f"{NAMESPACE_PREFIX}{uuid.uuid4().hex[:8]}"
        kubernetes.client.CoreV1Api(client).create_namespace({"metadata": {"name": name}})
        return cls(client, name)

    def create(self, plural: str, name: str, spec: dict[str, Any]) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KINDS[plural],
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": spec,
        }
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, body)

    def objects(self, plural: str) -> list[dict[str, Any]]:
        found = self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, plural)
        return list(found["items"])

    def status(self, plural: str, name: str) -> dict[str, Any]:
        obj = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, name)
        return dict(obj.get("status") or {})

    def pool(self, name: str, *, agents: int, agent: str = "echo", **spec: Any) -> str:
        """Create a pool of ``agents`` warm agents and wait until every one is available."""
        spec.setdefault("minSize", agents)
        self.create("agentpools", name, pool_spec(agent, **spec))
        wait_for(
            lambda: self.status("agentpools", name).get("available") == agents,
            90,
            message=f"{agents} agents available in pool {name}",
        )
        return name

    def leases(self) -> list[dict[str, Any]]:
        return self.objects("agentleases")

    def available(self, pool: str) -> int:
        return int(self.status("agentpools", pool).get("available") or 0)

    def returned(self, pool: str, agents: int, timeout: float = 10) -> None:
        """Wait until no lease is left and ``agents`` agents of ``pool`` are idle again."""
        wait_for(
            lambda: not self.leases() and self.available(pool) == agents,
            timeout,
            message=f"every lease gone and {agents} agents of {pool} idle",
        )


def kubeconfig_in(client_cluster: ClientCluster, namespace: str, path: Path) -> Path:
    """The test cluster's kubeconfig with its context's namespace set to ``namespace``."""
    handle = client_cluster.handle
    return namespaced_kubeconfig(handle.kubeconfig, handle.context, namespace, path)
