"""The echo agent of the benchmarks: it gives the item back and notes when it held it.

Like ``examples/agents/echo.py`` (an ``async`` handler, so an item never leaves the event loop and
all the time around it is protocol and operator), plus, when ``TIMINGS_FILE`` is set, one line
per item: ``pid run id start_ns end_ns`` (wall clock, comparable across processes). The overhead
scenario reads the idle gap between one item's end and the next item's start on each agent.
"""

from __future__ import annotations

import os
import time
from typing import IO, Any

from agentpool.agent import Agent, Context

_path = os.environ.get("TIMINGS_FILE")
# Line-buffered append: each line is one small write, atomic among the agents sharing the file.
_file: IO[str] | None = open(_path, "a", buffering=1, encoding="utf-8") if _path else None  # noqa: SIM115
_pid = os.getpid()


async def echo(item: Any, input: Any, context: Context) -> Any:
    """Give the item back unchanged, and note the time the handler held it."""
    start = time.time_ns()
    if _file is not None:
        _file.write(f"{_pid} {context.run} {context.id} {start} {time.time_ns()}\n")
    return item


agent = Agent(echo, name="bench-echo")
