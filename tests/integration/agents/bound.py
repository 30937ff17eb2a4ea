"""bound: an agent that tells each item which lease it serves and with what context.

The lease tests run it as a pool's agent (``python -m agentpool.agent
tests/integration/agents/bound.py:agent``) to see what a lease's holder reaches: the binding the
operator handed over at ``/bind``, and nothing of an earlier holder's after ``/unbind``.
"""

from __future__ import annotations

from typing import Any

from agentpool.agent import Agent, Context


async def tell(item: Any, input: Any, context: Context) -> dict[str, Any]:
    """The lease the agent is bound to and its context, or None for each when it is not."""
    binding = context.binding
    return {
        "lease": binding.lease if binding else None,
        "context": binding.context if binding else None,
    }


agent = Agent(tell, name="bound")
