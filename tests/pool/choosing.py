"""The agent a pool's next checkout gets, and the slots free for items, as the tests of the
hand-out order ask them."""

from __future__ import annotations

from collections.abc import Iterable

from agentpool.pool import ObservedAgent, PoolPolicy, available_agents
from agentpool.pool.checkout import is_available


def choose_agent(
    policy: PoolPolicy,
    agents: Iterable[ObservedAgent],
    *,
    now: float | None = None,
    whole: bool = False,
) -> str | None:
    """The name of the first agent the strategy hands out, or None when none is available."""
    available = available_agents(policy, agents, now=now, whole=whole)
    return available[0].name if available else None


def free_slots(policy: PoolPolicy, agents: Iterable[ObservedAgent], *, now: float) -> int:
    """Items the pool's agents could take at once now: the free slots of available agents."""
    return sum(agent.free_slots for agent in agents if is_available(policy, agent, now=now))
