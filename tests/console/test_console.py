"""What ``agentpool watch`` and the demo print, from a run's status alone."""

from __future__ import annotations

from datetime import UTC, datetime

from agentpool.console.progress import progress_of, render
from agentpool.console.tables import format_table

NOW = datetime(2026, 1, 1, 0, 0, 10, tzinfo=UTC)


def test_progress_line_shows_counts_rate_and_eta() -> None:
    """Half of 40 items done in 10 s: 2 items a second, 10 s to go."""
    status = {
        "phase": "Running",
        "total": 40,
        "succeeded": 18,
        "failed": 2,
        "active": 4,
        "startTime": "2026-01-01T00:00:00Z",
    }
    line = render(progress_of(status, NOW))
    assert line.startswith("[" + "#" * 15 + "." * 15 + "] 20/40")
    assert "18 done, 2 failed, 4 active, 2.0/s, ETA 10s, Running" in line


def test_finished_run_shows_its_result_and_no_eta() -> None:
    """A drained run reports its result, with the rate over its whole duration."""
    status = {
        "phase": "Succeeded",
        "result": "Drained",
        "total": 10,
        "succeeded": 10,
        "startTime": "2026-01-01T00:00:00Z",
        "completionTime": "2026-01-01T00:00:05Z",
    }
    line = render(progress_of(status, NOW))
    assert line.endswith("10 done, 0 failed, 0 active, 2.0/s, Drained")
    assert "ETA" not in line


def test_unknown_total_has_no_bar_or_eta() -> None:
    """A run fed by a source service has no total until it ends: no bar, no ETA."""
    line = render(progress_of({"phase": "Running", "succeeded": 3}, NOW))
    assert line.startswith("[" + "?" * 30 + "] 3/?")
    assert "ETA" not in line


def test_table_prints_like_kubectl_get() -> None:
    """Priority-0 columns, upper-cased, padded to the widest cell; -o wide columns left out."""
    table = {
        "columnDefinitions": [
            {"name": "Name", "priority": 0},
            {"name": "Phase", "priority": 0},
            {"name": "Done", "priority": 0},
            {"name": "Agent", "priority": 1},
        ],
        "rows": [
            {"cells": ["quickstart", "Succeeded", 37, "x"]},
            {"cells": ["b", None, 0, "y"]},
        ],
    }
    assert format_table(table).splitlines() == [
        "NAME         PHASE       DONE",
        "quickstart   Succeeded   37",
        "b            <none>      0",
    ]
