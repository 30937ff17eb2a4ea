"""The agent a pool's next checkout gets, as the tests of the hand-out order ask it."""

from __future__ import annotations

from collections.abc import Iterable

from agentpool.pool import ObservedAgent, PoolPolicy, available_agents


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
