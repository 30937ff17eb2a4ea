"""What an agent author writes: an ``Agent`` made of a start-up, a handler and optional hooks.

Agent authors import ``Agent`` from ``agentpool.agent``; ``agentpool.agent.server`` serves it over
the protocol and ``python -m agentpool.agent MODULE:OBJECT`` finds it and runs it.

The start-up is the expensive part (a model to load, tools to initialise) and runs once; what it
returns is handed to every item as ``context.state`` and to ``reset``, ``bind`` and ``unbind``,
which hear of an AgentLease taking the agent and giving it back. Each function may be synchronous
(run in the agent's worker thread, so the server keeps answering) or ``async``. The handler may
also be an async generator function: each ``yield`` is a part of the output, sent to a caller
that asks for a streamed answer as soon as it is made; anyone else gets the list of the parts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from agentpool.agent.binding import Binding
from agentpool.agent.context import Context

#: ``handler(item, input, context) -> output``; the output must be JSON serialisable. An async
#: generator function yields the output's parts instead, each JSON serialisable.
Handler = Callable[[Any, Any, Context], Any]
#: ``startup() -> state``: the expensive part, done once before the agent reports ready.
Startup = Callable[[], Any]
#: ``reset(state) -> None``: return to a fresh state between items when the pool asks for it.
Reset = Callable[[Any], Any]
#: ``bind(state, binding) -> None``: a lease takes the agent; raising refuses it (BindFailed).
Bind = Callable[[Any, Binding], Any]
#: ``unbind(state, binding) -> None``: the lease gives it back, before ``reset`` runs.
Unbind = Callable[[Any, Binding], Any]


class Agent:
    """An agent: a handler served item after item once its start-up is done."""

    def __init__(
        self,
        handler: Handler,
        *,
        startup: Startup | None = None,
        reset: Reset | None = None,
        bind: Bind | None = None,
        unbind: Unbind | None = None,
        name: str | None = None,
    ) -> None:
        if not callable(handler):
            raise TypeError(f"an agent's handler must be callable, not {type(handler).__name__}")
        self.handler = handler
        self.startup = startup
        self.reset = reset
        self.bind = bind
        self.unbind = unbind
        self.name = name or getattr(handler, "__module__", None) or "agent"
        self.logger = logging.getLogger(f"agentpool.agent.{self.name}")

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r})"

    def run(self, *, host: str | None = None, port: int | None = None) -> int:
        """Serve this agent until SIGTERM and return the exit status (for ``__main__`` blocks)."""
        # Imported on use: the local kubelet's simulated agent imports parts of this package
        # (the route table, the binding) and has no use for the HTTP server behind them.
        from agentpool.agent.running import run_agent

        return run_agent(self, host=host, port=port)
