"""The SDK for agent authors: write a start-up and a handler, get the agent protocol served.

::

    from agentpool.agent import Agent

    def load():                      # the expensive part, done once before the agent is Ready
        return {"model": ...}

    def handle(item, input, context):  # one item; context.state is what load() returned
        return {"answer": ...}

    agent = Agent(handle, startup=load)

``python -m agentpool.agent my_module:agent`` (or ``path/to/file.py:agent``) serves it on
``AGENT_HOST``/``AGENT_PORT`` (default ``0.0.0.0:8080``) for callers holding ``AGENTPOOL_TOKEN``,
which must be set. ``agentpool.agent.server`` serves it, ``agentpool.agent.protocol`` holds the
protocol's words, and the operator's side of the wire is ``agentpool.io.agents``.
"""

from agentpool.agent.agents import Agent
from agentpool.agent.context import Context

__all__ = ["Agent", "Context"]
