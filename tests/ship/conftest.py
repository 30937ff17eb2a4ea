"""The operator scenarios, each run once per test session for the metrics and RBAC tests."""

from __future__ import annotations

import pytest

from ship.scenario import NAMESPACE, Outcome, drive_one_run, run_scenario


@pytest.fixture(scope="session")
def operator_outcome(kube_context: str | None, tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    """The operator's requests and metrics over one scenario on a local cluster of its own."""
    if kube_context is not None:
        pytest.skip(
            "the scenario starts a local cluster of its own behind a recording proxy, which the "
            "local pass runs; on a real cluster the Helm test proves the chart's RBAC"
        )
    return run_scenario(tmp_path_factory.mktemp("ship-scenario"))


@pytest.fixture(scope="session")
def namespaced_outcome(
    kube_context: str | None, tmp_path_factory: pytest.TempPathFactory
) -> Outcome:
    """The operator's requests over a short run while it serves one listed namespace."""
    if kube_context is not None:
        pytest.skip(
            "the scenario starts a local cluster of its own behind a recording proxy, which the "
            "local pass runs; on a real cluster the Helm test proves the chart's RBAC"
        )
    return run_scenario(
        tmp_path_factory.mktemp("ship-namespaced"),
        scope=("--namespace", NAMESPACE),
        drive=drive_one_run,
    )
