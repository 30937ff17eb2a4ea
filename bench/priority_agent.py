"""The agent of the priorities scenario: an echo that takes a while, behind a start gate.

Start-up waits until the file ``GATE_FILE`` exists, so every run's checkouts are queued before
any agent is Ready and the order they are served in is the broker's alone. Each item takes
``WORK_SECONDS`` (an ``asyncio`` sleep, as an agent waiting on a model API would) and, as
:mod:`bench.echo_agent` does, notes one line per item in ``TIMINGS_FILE``:
``pid run id start_ns end_ns`` (wall clock, comparable across processes).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import IO, Any

from agentpool.agent import Agent, Context

_path = os.environ.get("TIMINGS_FILE")
# Line-buffered append: each line is one small write, atomic among the agents sharing the file.
_file: IO[str] | None = open(_path, "a", buffering=1, encoding="utf-8") if _path else None  # noqa: SIM115
_pid = os.getpid()
_work = float(os.environ.get("WORK_SECONDS", "0.05"))


def wait_for_gate() -> None:
    """Hold start-up (and so readiness) until the bench opens the gate."""
    gate = os.environ.get("GATE_FILE")
    while gate and not Path(gate).exists():
        time.sleep(0.02)


async def echo(item: Any, input: Any, context: Context) -> Any:
    """Give the item back after ``WORK_SECONDS``, and note when the handler held it."""
    start = time.time_ns()
    await asyncio.sleep(_work)
    if _file is not None:
        _file.write(f"{_pid} {context.run} {context.id} {start} {time.time_ns()}\n")
    return item


agent = Agent(echo, startup=wait_for_gate, name="bench-priority-echo")
