"""Options shared by the whole suite.

``--kube-context NAME`` (of ``$KUBECONFIG`` or ``~/.kube/config``) or ``--kubeconfig PATH`` (its
current context unless ``--kube-context`` says otherwise) points the cluster tests at a real
cluster instead of the local one, so the same scenarios show that both behave alike.
``local_cluster`` and ``kubectl`` are the shared cluster fixtures; what they build on lives in
``tests/cluster.py``.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from agentpool.handlers.operator import embedded_operator
from cluster import ClusterHandle, ClusterThread, Kubectl, default_kubeconfig


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--kube-context",
        default=None,
        help="run the cluster tests against this kubeconfig context instead of the local cluster",
    )
    parser.addoption(
        "--operator-replicas",
        type=int,
        default=1,
        help="run the operator tests (tests/integration) on this many replicas sharing the pools "
        "(agentpool run --share)",
    )
    parser.addoption(
        "--kubeconfig",
        default=None,
        help="run the cluster tests against this kubeconfig's cluster instead of the local one",
    )


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--kubeconfig")
    if path:
        # Every client of the session (the fixtures, kubectl, helm, an operator it starts) reads
        # the same file, as they would read KUBECONFIG on a developer's machine.
        os.environ["KUBECONFIG"] = str(Path(path).resolve())
        if not config.getoption("--kube-context"):
            current = (yaml.safe_load(Path(path).read_text()) or {}).get("current-context")
            config.option.kube_context = current


def pytest_sessionstart(session: pytest.Session) -> None:
    """No event loop is current in the main thread until a test sets one. Otherwise the first
    ``get_event_loop()`` there makes one (Python < 3.14) that nothing closes: the looptime plugin
    asks for it around every test, sync ones too, and the loop's ResourceWarning, an error here,
    failed whichever later test was running when the loop was collected."""
    asyncio.set_event_loop(None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a real cluster, skip the tests marked ``local_only``, each with its own reason, and the
    tests that touch no cluster at all (no ``kube_context`` among their fixtures, which every
    cluster fixture starts from): they ran in the local pass, and a second run on the same
    machine would prove nothing more."""
    if not config.getoption("--kube-context"):
        return
    apart = pytest.mark.skip(reason="touches no cluster: the local pass ran it")
    for item in items:
        marker = item.get_closest_marker("local_only")
        if marker is not None:
            reason = marker.args[0] if marker.args else "needs the local cluster"
            item.add_marker(pytest.mark.skip(reason=f"local cluster only: {reason}"))
        elif "kube_context" not in getattr(item, "fixturenames", ()):
            item.add_marker(apart)


@pytest.fixture(scope="session")
def kube_context(request: pytest.FixtureRequest) -> str | None:
    """The kubeconfig context named by ``--kube-context``, or None for the local cluster."""
    value = request.config.getoption("--kube-context")
    return str(value) if value else None


@pytest.fixture(scope="session")
def scratch_root() -> Iterator[Path]:
    """A directory for the whole session outside pytest's basetemp, which a concurrent pytest run
    on the same machine may rotate away while this one still runs (pods keep logs there)."""
    with tempfile.TemporaryDirectory(prefix="agentpool-tests-") as directory:
        yield Path(directory)


@pytest.fixture
def scratch(scratch_root: Path, request: pytest.FixtureRequest) -> Path:
    """A fresh directory for one test under :func:`scratch_root`."""
    return Path(tempfile.mkdtemp(prefix=request.node.name[:40] + "-", dir=scratch_root))


@pytest.fixture(scope="session")
def local_cluster(kube_context: str | None, scratch_root: Path) -> Iterator[ClusterHandle]:
    """The cluster the integration tests use: a LocalCluster (API server, kubelet, operator) in a
    background thread, or the real cluster named by ``--kube-context``."""
    if kube_context is not None:
        yield ClusterHandle(kubeconfig=default_kubeconfig(), context=kube_context)
        return
    directory = scratch_root / "local-cluster"
    server = ClusterThread(directory, operator=embedded_operator(directory.resolve() / "operator"))
    handle = server.start()
    try:
        yield handle
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _the_local_clusters_operator_runs(request: pytest.FixtureRequest) -> None:
    """Once the session's local cluster's operator has stopped, each later test on that cluster
    fails at setup, saying why, instead of waiting out its deadlines for agents that never
    come."""
    if "local_cluster" not in request.fixturenames:
        return
    handle: ClusterHandle = request.getfixturevalue("local_cluster")
    stopped = handle.operator_stopped()
    if stopped is not None:
        pytest.fail(f"the local cluster's operator has stopped: {stopped}")


@pytest.fixture(scope="session")
def kubectl(local_cluster: ClusterHandle, scratch_root: Path) -> Kubectl:
    """kubectl for the test cluster, with a cache directory fresh to this test session."""
    return Kubectl(
        local_cluster.kubeconfig,
        Path(tempfile.mkdtemp(prefix="kubectl-cache-", dir=scratch_root)),
        context=local_cluster.context,
    )
