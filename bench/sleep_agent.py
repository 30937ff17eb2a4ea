"""The sleeping agent of the slots benchmark: each item takes ``SLEEP_SECONDS`` (0.1) of waiting.

Like a model API call, the wait costs the agent no CPU: the handler is ``async`` and sleeps on the
event loop, so an agent with several slots serves that many items side by side. With
``TIMINGS_FILE`` set it writes one line per item, ``pid run id start_ns end_ns`` (wall clock,
comparable across processes), as ``bench/echo_agent.py`` does.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import IO, Any

from agentpool.agent import Agent, Context

_path = os.environ.get("TIMINGS_FILE")
# Line-buffered append: each line is one small write, atomic among the agents sharing the file.
_file: IO[str] | None = open(_path, "a", buffering=1, encoding="utf-8") if _path else None  # noqa: SIM115
_pid = os.getpid()
_sleep = float(os.environ.get("SLEEP_SECONDS", "0.1"))


async def sleep(item: Any, input: Any, context: Context) -> Any:
    """Wait as a call to a model would, then give the item back; note when it was held."""
    start = time.time_ns()
    await asyncio.sleep(_sleep)
    if _file is not None:
        _file.write(f"{_pid} {context.run} {context.id} {start} {time.time_ns()}\n")
    return item


agent = Agent(sleep, name="bench-sleep")
