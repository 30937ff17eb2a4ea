"""The README's main job: ``agentpool demo`` runs the quickstart to a drained end and exits 0."""

from __future__ import annotations

import subprocess
import sys

from operator_support import REPO


def test_demo_runs_the_quickstart_to_a_drained_end() -> None:
    """The demo starts its own local cluster, shows progress, prints the run's kubectl row and
    the three items that ask to fail, cleans up and exits 0."""
    result = subprocess.run(
        [sys.executable, "-m", "agentpool", "demo"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("NAME "))
    assert lines[header].split() == [
        "NAME",
        "POOL",
        "PHASE",
        "RESULT",
        "DONE",
        "FAILED",
        "ACTIVE",
        "TOTAL",
        "AGE",
    ]
    assert lines[header + 1].split()[:8] == [
        "quickstart",
        "quickstart",
        "Succeeded",
        "Drained",
        "37",
        "3",
        "0",
        "40",
    ]
    assert "3 failed items:" in result.stdout
    for item in ("item-07", "item-19", "item-33"):
        assert f"{item}: " in result.stdout
    assert result.stderr.strip() == ""
