"""echo: the smallest agent; its output is the item it was given.

Run it by hand from anywhere (the path may be relative to the working directory or absolute)::

    AGENTPOOL_TOKEN=secret AGENT_PORT=8080 python -m agentpool.agent examples/agents/echo.py:agent

The handler is ``async``, so an item never leaves the event loop: the benchmark of the protocol's
own overhead (``bench/agents.py``) runs against this agent. With ``INVOCATIONS_FILE`` set it
records every invocation (see ``invocations.py``).
"""

from __future__ import annotations

from typing import Any

from invocations import record_invocation

from agentpool.agent import Agent, Context


async def echo(item: Any, input: Any, context: Context) -> Any:
    """Give the item back unchanged."""
    record_invocation(context)
    return item


agent = Agent(echo, name="echo")

if __name__ == "__main__":
    raise SystemExit(agent.run())
