"""Fixtures of the operator tests: a cluster with the operator in its own process.

The cluster is a local one started here, or the real one named by ``--kubeconfig`` or
``--kube-context``, whose API server and kubelet are already running.

One cluster and one operator serve the whole package; each test works in a namespace of its
own, so tests do not see each other's pools, runs or leases. With ``--operator-replicas N`` the
operator is N replicas sharing the pools, and every test here must pass on them too.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from operator_support import (
    Api,
    OperatorProcess,
    OperatorReplicas,
    ReplicaCluster,
    lease_renewals,
)

from cluster import ClusterHandle, ClusterThread, Kubectl, default_kubeconfig

#: The operator (or replicas) the package's tests run against, for the report of a failure.
RUNNING = pytest.StashKey["OperatorProcess | OperatorReplicas"]()
#: The most of the operator's log a failed test's report shows.
LOG_LINES = 200


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test's report carries what the operator logged about the test's namespace (its
    last lines when it named none): in CI, the operator's log is gone with its scratch
    directory."""
    report = yield
    operator = item.config.stash.get(RUNNING, None)
    if report.when == "call" and report.failed and operator is not None:
        namespace = item.funcargs.get("namespace") if isinstance(item, pytest.Function) else None
        lines = operator.log().splitlines()
        named = [line for line in lines if namespace and str(namespace) in line]
        report.sections.append(("operator log", "\n".join((named or lines)[-LOG_LINES:])))
    return report


@dataclass
class OperatorCluster:
    handle: ClusterHandle
    #: The arguments that point an ``agentpool`` command at this cluster.
    connection: list[str]
    operator: OperatorProcess | OperatorReplicas
    thread: ClusterThread | None
    dir: Path


@pytest.fixture(scope="package")
def operator_cluster(
    kube_context: str | None, scratch_root: Path, request: pytest.FixtureRequest
) -> Iterator[OperatorCluster]:
    directory = scratch_root / "operator-cluster"
    directory.mkdir()
    thread: ClusterThread | None = None
    if kube_context is not None:
        # A real cluster: its own kubelet runs the pods; the operator runs here, as the tests
        # start and kill it, with the kubeconfig's credentials.
        handle = ClusterHandle(kubeconfig=default_kubeconfig(), context=kube_context)
        connection = ["--kubeconfig", str(handle.kubeconfig), "--context", kube_context]
        # Only the tests' own namespaces (Api.new_namespace): on a real cluster this operator
        # outlives the package (a conftest outside a Python package scopes it to the session),
        # and the Helm test's operator must be the only one serving its namespace.
        scope = ["--namespace", "t-*"]
    else:
        thread = ClusterThread(directory)
        handle = thread.start()
        connection = ["--kubeconfig", str(handle.kubeconfig)]
        scope = []
    # One operator, or with --operator-replicas N, N replicas sharing the pools.
    replicas = int(request.config.getoption("--operator-replicas"))
    operator: OperatorProcess | OperatorReplicas
    client = handle.api_client()
    if replicas > 1:
        operator = OperatorReplicas(
            [*connection, *scope], directory, replicas, lambda: lease_renewals(client, "agentpool")
        )
    else:
        operator = OperatorProcess([*connection, *scope], directory / "operator.log")
    try:
        operator.start()
        request.config.stash[RUNNING] = operator
        yield OperatorCluster(
            handle=handle,
            connection=connection,
            operator=operator,
            thread=thread,
            dir=directory,
        )
    finally:
        if RUNNING in request.config.stash:
            del request.config.stash[RUNNING]
        operator.stop()
        client.close()
        if thread is not None:
            thread.stop()


@pytest.fixture(scope="package")
def api(operator_cluster: OperatorCluster) -> Iterator[Api]:
    client = operator_cluster.handle.api_client()
    try:
        yield Api(client)
    finally:
        client.close()


@pytest.fixture
def namespace(api: Api) -> str:
    """A namespace of the test's own."""
    return api.new_namespace()


@pytest.fixture(scope="package")
def kubectl_op(
    operator_cluster: OperatorCluster, tmp_path_factory: pytest.TempPathFactory
) -> Kubectl:
    """kubectl for the operator tests' cluster, with a fresh cache directory."""
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed; install it to run the kubectl end-to-end tests")
    return Kubectl(
        operator_cluster.handle.kubeconfig,
        tmp_path_factory.mktemp("kubectl-op-cache"),
        context=operator_cluster.handle.context,
    )


@pytest.fixture
def cluster_alone(kube_context: str | None, scratch: Path) -> Iterator[tuple[Api, list[str], Path]]:
    """A local cluster of the test's own, with no operator: the test starts its replicas. Its
    API, the arguments that point ``agentpool run`` at it, and the test's scratch directory."""
    if kube_context is not None:
        pytest.skip("needs a cluster with no other operator: runs on a local cluster only")
    thread = ClusterThread(scratch / "cluster")
    handle = thread.start()
    client = handle.api_client()
    try:
        yield Api(client), ["--kubeconfig", str(handle.kubeconfig)], scratch
    finally:
        client.close()
        thread.stop()


@pytest.fixture
def replica_cluster(
    kube_context: str | None, scratch: Path, request: pytest.FixtureRequest
) -> Iterator[ReplicaCluster]:
    """On the local cluster, one of the test's own with no operator; on a real one, the
    package's cluster, the replicas scoped to the test's namespaces and their group its own."""
    if kube_context is None:
        thread = ClusterThread(scratch / "cluster")
        handle = thread.start()
        client = handle.api_client()
        try:
            connection = ["--kubeconfig", str(handle.kubeconfig)]
            yield ReplicaCluster(Api(client), connection, "agentpool", "t", scratch)
        finally:
            client.close()
            thread.stop()
        return
    cluster: OperatorCluster = request.getfixturevalue("operator_cluster")
    api: Api = request.getfixturevalue("api")
    tag = uuid.uuid4().hex[:6]
    connection = [*cluster.connection, "--namespace", f"r{tag}-*"]
    yield ReplicaCluster(api, connection, f"agentpool-{tag}", f"r{tag}", scratch)
