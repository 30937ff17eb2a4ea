"""The SDK for agent authors: write a start-up and a handler, get the agent protocol served.

::

    from agentpool.agent import Agent

    def load():                      # the expensive part, done once before the agent is Ready
        return {"model": ...}

    def handle(item, input, context):  # one item; context.state is what load() returned
        return {"answer": ...}

    agent = Agent(handle, startup=load)

A handler may instead be an async generator function, each ``yield`` a part of the output: a
caller that asks for a streamed answer gets each part as it is made (``agentpool.agent.streams``),
anyone else the list of the parts.

``python -m agentpool.agent my_module:agent`` (or ``path/to/file.py:agent``) serves it on
``AGENT_HOST``/``AGENT_PORT`` (default ``0.0.0.0:8080``) for callers holding ``AGENTPOOL_TOKEN``,
which must be set. ``agentpool.agent.server`` serves it, ``agentpool.wire.protocol`` holds the
protocol's words, and the operator's side of the wire is ``agentpool.io.agents``.

An agent an AgentLease binds (``POST /bind``) also serves that lease's holder, with the lease's own
token, until its expiry or ``POST /unbind``; ``Agent(..., bind=fn, unbind=fn)`` are told of both
(``fn(state, binding)``), and the handler finds the lease's ``Binding`` in ``context.binding``.
"""

from agentpool.agent.agents import Agent
from agentpool.agent.binding import Binding
from agentpool.agent.context import Context

__all__ = ["Agent", "Binding", "Context"]
