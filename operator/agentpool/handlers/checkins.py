"""Giving an agent back to its pool: the one way a run's item and a lease return their agent.

:mod:`agentpool.handlers.dispatch` calls :func:`return_agent` when an item is done with its
agent, :mod:`agentpool.handlers.leases` when a lease ends. When the pool asks for a reset between
items, the agent is reset first, over :mod:`agentpool.io.agents`, and one whose reset fails is
retired.
"""

from __future__ import annotations

from agentpool.broker import CheckinOutcome, Checkout
from agentpool.handlers.runtime import PoolHandle, Runtime


async def return_agent(
    runtime: Runtime, handle: PoolHandle, checkout: Checkout, verdict: CheckinOutcome
) -> None:
    """Give an agent back to its pool, resetting it first when the pool asks for that; an agent
    whose reset fails is retired."""
    if (
        verdict in (CheckinOutcome.SUCCESS, CheckinOutcome.FAILURE)
        and handle.reset_between_items
        and not checkout.is_lost
        and not await runtime.agents.reset(checkout.endpoint, handle.token)
    ):
        verdict = CheckinOutcome.RESET_FAILED
    handle.broker.checkin(checkout, verdict)
