"""The manual's "Use it from Python" example runs as printed, against the quickstart pool.

The example is taken from the guide itself (docs/guides/python.md), so the two cannot drift
apart; it runs as a user would run it, in a process of its own with ``KUBECONFIG`` naming the
cluster and a context whose namespace holds the quickstart pool.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from client_support import ClientCluster, Outside, kubeconfig_in

from cluster import wait_for
from docblocks import block_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def guide_example() -> str:
    return block_for(
        "tests/client/test_client_readme.py::test_the_from_python_example_runs_as_printed",
        REPO / "docs" / "guides" / "python.md",
    ).text


def test_the_from_python_example_runs_as_printed(
    client_cluster: ClientCluster, outside: Outside, tmp_path: Path
) -> None:
    """It prints the pool's status, two outputs from one leased agent, one call's output, each
    of the run's eight results (one of them the failure it asks for) and Succeeded."""
    pool = yaml.safe_load((REPO / "examples" / "quickstart" / "pool.yaml").read_text())
    outside.create("agentpools", "quickstart", pool["spec"])
    wait_for(lambda: outside.available("quickstart") == 2, 90, message="quickstart ready")
    env = {
        **os.environ,
        "KUBECONFIG": str(
            kubeconfig_in(client_cluster, outside.namespace, tmp_path / "kubeconfig")
        ),
    }
    done = subprocess.run(
        [sys.executable, "-c", guide_example()],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "state='Ready'" in lines[0]
    assert len(lines) == 1 + 2 + 1 + 8 + 1, done.stdout
    assert lines[1].split()[0] == lines[2].split()[0]  # one agent served both calls
    assert {line.split()[0] for line in lines[4:12]} == {f"doc-{n}" for n in range(8)}
    assert "HandlerError" in next(line for line in lines[4:12] if line.startswith("doc-3 "))
    assert lines[-1] == "Succeeded"
    wait_for(lambda: not outside.leases(), 10, message="the example's leases released")
