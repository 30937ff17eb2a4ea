"""Fixtures of the Python client tests: a cluster with an operator, a namespace, a client.

On the local cluster the session's own operator serves every namespace. With ``--kubeconfig`` or
``--kube-context`` the tests run on that cluster, with an operator started here for their
namespaces only (``c-*``), so they need nothing of the local cluster's internals.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import kubernetes
import pytest
from client_support import NAMESPACE_PREFIX, ClientCluster, Outside

from agentpool.client import Client
from cluster import ClusterHandle

REPO = Path(__file__).resolve().parents[2]
#: Its gateway on loopback, on any free port: the namespaces' ConfigMaps say which.
LOOPBACK_GATEWAY = ("--gateway-host", "127.0.0.1", "--gateway-port", "0")


@pytest.fixture(scope="session")
def client_cluster(
    local_cluster: ClusterHandle, kube_context: str | None, scratch_root: Path
) -> Iterator[ClientCluster]:
    if kube_context is None:
        yield ClientCluster(local_cluster)
        return
    connection = ["--kubeconfig", str(local_cluster.kubeconfig), "--context", kube_context]
    scope = ["--namespace", f"{NAMESPACE_PREFIX}*"]
    log = (scratch_root / "client-operator.log").open("ab")
    operator = subprocess.Popen(
        [sys.executable, "-m", "agentpool", "run", *connection, *scope, *LOOPBACK_GATEWAY],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    try:
        yield ClientCluster(local_cluster)
    finally:
        operator.terminate()
        try:
            operator.wait(30)
        except subprocess.TimeoutExpired:
            operator.kill()
            operator.wait(10)


@pytest.fixture(scope="session")
def api_client(client_cluster: ClientCluster) -> Iterator[kubernetes.client.ApiClient]:
    client = client_cluster.handle.api_client()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def outside(api_client: kubernetes.client.ApiClient) -> Outside:
    """A namespace of the test's own, seen through the official kubernetes client."""
    return Outside.new_namespace(api_client)


@pytest.fixture
async def client(client_cluster: ClientCluster, outside: Outside) -> AsyncIterator[Client]:
    """The client under test, in the test's namespace."""
    handle = client_cluster.handle
    async with Client.from_kubeconfig(
        handle.kubeconfig, handle.context, namespace=outside.namespace
    ) as client:
        yield client
