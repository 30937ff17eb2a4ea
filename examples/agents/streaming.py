"""streaming: an agent whose answer comes a word at a time, as a model's tokens do.

The handler is an async generator: each ``yield`` is a part, sent at once to a caller that
streams (``agentpool call --stream``, ``Client.stream``, or ``Accept: text/event-stream`` on a
gateway call), and the list of the parts is the output for everyone else. The item is
``{"question": TEXT}``; the answer echoes it word by word. ``{"after": PATH}`` in the item holds
every word past the first until the file PATH exists, and ``{"fail": WHY}`` raises after the
first word, so a reader can watch a stream arrive, and fail, part by part. Run it by hand with
``AGENTPOOL_TOKEN=secret AGENT_PORT=8080 python -m agentpool.agent
examples/agents/streaming.py:agent``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agentpool.agent import Agent, Context

#: The longest a word waits for its ``after`` file.
HOLD_SECONDS = 60.0


async def answer(item: Any, input: Any, context: Context) -> AsyncIterator[str]:
    """The question's echo, word by word."""
    words = f"You asked: {item['question']}".split()
    yield words[0]
    if "fail" in item:
        raise RuntimeError(item["fail"])
    if "after" in item:
        gate = Path(item["after"])
        async with asyncio.timeout(HOLD_SECONDS):
            while not gate.exists():  # noqa: ASYNC110, ASYNC240 (a file another process makes)
                await asyncio.sleep(0.02)
    for word in words[1:]:
        yield word


agent = Agent(answer, name="streaming")

if __name__ == "__main__":
    raise SystemExit(agent.run())
