"""``agentpool watch RUN`` and ``agentpool results RUN``: a PoolRun as its user sees it.

Both read the run through the Kubernetes API module; ``results`` also reads the ConfigMaps that
hold results too large for the run's status, so every output and failure comes back, however
large the run.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import TextIO

from agentpool.api import RawRunStatus, raw_run_status
from agentpool.console.progress import ProgressWatch
from agentpool.io.kube import Kube, ObjectNotFound
from agentpool.wire.results import ResultRecord, iter_results

POLL_SECONDS = 0.5


def finished(status: RawRunStatus) -> bool:
    return status.get("phase") in ("Succeeded", "Failed")


def exit_code(status: RawRunStatus) -> int:
    """0 for a run that succeeded, 1 for one that failed."""
    return 0 if status.get("phase") == "Succeeded" else 1


async def watch_run(
    kube: Kube,
    namespace: str,
    name: str,
    *,
    out: TextIO = sys.stdout,
    timeout: float | None = None,
) -> int:
    """Print a live progress line until the run ends; return its exit code.

    On a terminal the line is redrawn in place; elsewhere a line is printed when it changes.
    """
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    last = ""
    interactive = out.isatty()
    progress: ProgressWatch | None = None
    while True:
        try:
            run = await kube.get_custom("poolruns", namespace, name)
        except ObjectNotFound:
            print(f'poolrun "{name}" not found in namespace "{namespace}"', file=sys.stderr)
            return 2
        status = raw_run_status(run)
        if progress is None:
            source = (run.get("spec") or {}).get("source") or {}
            progress = ProgressWatch(total_known="http" not in source)
        line = progress.line(status, datetime.now(UTC))
        if line != last:
            if interactive:
                out.write("\r\x1b[2K" + line)
            else:
                out.write(line + "\n")
            out.flush()
            last = line
        if finished(status):
            if interactive:
                out.write("\n")
            message = status.get("message")
            if message:
                out.write(f"{message}\n")
            return exit_code(status)
        if deadline is not None and loop.time() > deadline:
            out.write(f"\ngave up waiting for poolrun {name} after {timeout:.0f}s\n")
            return 3
        await asyncio.sleep(POLL_SECONDS)


async def collect_results(kube: Kube, namespace: str, name: str) -> Iterator[ResultRecord]:
    """Every output and failure of the run, from its status and its result ConfigMaps."""
    run = await kube.get_custom("poolruns", namespace, name)
    status = raw_run_status(run)
    configmaps: list[dict[str, str]] = []
    for ref in status.get("resultRefs") or []:
        configmap = await kube.read_configmap(namespace, ref["name"])
        configmaps.append(configmap.get("data") or {})
    return iter_results(status, configmaps)


def print_results(records: Iterable[ResultRecord], out: TextIO = sys.stdout) -> int:
    count = 0
    for record in records:
        out.write(json.dumps(record, sort_keys=True) + "\n")
        count += 1
    return count
