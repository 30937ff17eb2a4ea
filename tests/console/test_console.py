"""What ``agentpool watch`` and the demo print, from a run's status alone."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from agentpool.console.progress import ProgressWatch, progress_of, render
from agentpool.console.tables import format_table

NOW = datetime(2026, 1, 1, 0, 0, 10, tzinfo=UTC)


def test_progress_line_shows_counts_rate_and_eta() -> None:
    """Ten items finished in the 5 s between two looks: 2 items a second, 20 items left, 10 s
    to go. A single look shows counts only, since a status does not say how fast they move."""
    watch = ProgressWatch()
    status = {
        "phase": "Running",
        "total": 40,
        "active": 4,
        "startTime": "2026-01-01T00:00:00Z",
    }
    looks = [(0, 0, 0), (5, 9, 1), (10, 18, 2)]
    lines = [
        watch.line({**status, "succeeded": done, "failed": failed}, NOW + timedelta(seconds=at))
        for at, done, failed in looks
    ]
    assert lines[0].endswith("0/40, 0 done, 0 failed, 4 active, Running")
    assert lines[-1].startswith("[" + "#" * 15 + "." * 15 + "] 20/40")
    assert "18 done, 2 failed, 4 active, 2.0/s, ETA 10s, Running" in lines[-1]


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


def quickstart_looks() -> list[tuple[float, dict[str, Any], float]]:
    """What `agentpool watch` sees of a run like the quickstart's, scaled up: (seconds since the
    first look, status, seconds the run still has to go).

    The run starts at 0.7 s (its startTime, written to the second, says 0); its agents are
    Ready at 3 s, and from then 400 items go through at 40 a second, done at 13 s. Status is
    written at the start, when the first items finish, then once a second; the watch looks
    every half second.
    """
    start = datetime(2026, 1, 1, tzinfo=UTC)
    end = 13.0
    writes = [0.7, *(3.1 + n for n in range(10)), end]
    looks = []
    for n in range(1, 27):
        at = n * 0.5
        written = max(w for w in writes if w <= at) if at >= writes[0] else None
        if written is None:
            status: dict[str, Any] = {}
        else:
            done = min(400, max(0, round((written - 3.0) * 40)))
            status = {
                "phase": "Succeeded" if written >= end else "Running",
                "total": 400,
                "succeeded": done,
                "active": 0 if written >= end else 4,
                "startTime": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
            if written >= end:
                status["result"] = "Drained"
                status["completionTime"] = (start + timedelta(seconds=end)).strftime(
                    "%Y-%m-%dT%H:%M:%SZ"
                )
        looks.append((at, status, max(0.0, end - at)))
    return looks


def test_the_first_eta_is_near_the_time_left() -> None:
    """The first ETA printed is within a factor of two of the time the run has left, though the
    run spent its first seconds waiting for agents to start and status is written only once a
    second: the rate is what the watch saw items go at, not an average since the start."""
    watch = ProgressWatch()
    start = datetime(2026, 1, 1, tzinfo=UTC)
    etas = []
    for at, status, left in quickstart_looks():
        line = watch.line(status, start + timedelta(seconds=at))
        found = re.search(r"ETA (\d+)s", line)
        if found:
            etas.append((int(found.group(1)), left, line))
    assert etas, "the watch printed an ETA while the run went on"
    first, left, line = etas[0]
    assert left / 2 <= first <= left * 2, line


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


def test_a_run_fed_by_a_source_service_shows_no_eta_until_its_total_is_known() -> None:
    """A source service's run counts in `total` the items seen so far, not the items to come:
    the watch shows neither a bar nor an ETA from it while the run goes on."""
    watch = ProgressWatch(total_known=False)
    status = {"phase": "Running", "total": 12, "active": 4, "startTime": "2026-01-01T00:00:00Z"}
    lines = [
        watch.line({**status, "succeeded": done}, NOW + timedelta(seconds=at))
        for at, done in [(0, 0), (1, 4), (2, 8)]
    ]
    assert lines[-1].startswith("[" + "?" * 30 + "] 8/?")
    assert "4.0/s" in lines[-1]
    assert "ETA" not in lines[-1]
