"""Options shared by the whole suite.

``--kube-context NAME`` points the cluster tests at a real cluster instead of the local one, so the
same scenarios show that both behave alike. ``local_cluster`` and ``kubectl`` are the shared cluster
fixtures; the helpers behind them live in ``tests/cluster.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cluster import ClusterHandle, ClusterThread, Kubectl, default_kubeconfig


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--kube-context",
        default=None,
        help="run the cluster tests against this kubeconfig context instead of the local cluster",
    )


@pytest.fixture(scope="session")
def kube_context(request: pytest.FixtureRequest) -> str | None:
    """The kubeconfig context named by ``--kube-context``, or None for the local cluster."""
    value = request.config.getoption("--kube-context")
    return str(value) if value else None


@pytest.fixture(scope="session")
def local_cluster(
    kube_context: str | None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ClusterHandle]:
    """The cluster the integration tests use: a LocalCluster (API server, kubelet, operator) in a
    background thread, or the real cluster named by ``--kube-context``."""
    if kube_context is not None:
        yield ClusterHandle(kubeconfig=default_kubeconfig(), context=kube_context)
        return
    server = ClusterThread(tmp_path_factory.mktemp("local-cluster"))
    handle = server.start()
    try:
        yield handle
    finally:
        server.stop()


@pytest.fixture(scope="session")
def kubectl(local_cluster: ClusterHandle, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    """kubectl for the test cluster, with a cache directory fresh to this test session."""
    return Kubectl(
        local_cluster.kubeconfig,
        tmp_path_factory.mktemp("kubectl-cache"),
        context=local_cluster.context,
    )
