"""Options shared by the whole suite.

``--kube-context NAME`` points the cluster tests at a real cluster instead of the local one, so the
same scenarios show that both behave alike.
"""

from __future__ import annotations

import pytest


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
