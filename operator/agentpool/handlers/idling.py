"""Waiting for a held agent to say it is idle, or done with one item (``GET /status``).

A restarted operator holds the agents it finds busy this way until they finish
(:mod:`agentpool.handlers.recovery`), and a cast, or a call whose holder went away mid-call,
holds its agent until the item is done (:mod:`agentpool.handlers.checkins`);
:class:`agentpool.pool.restoring.IdleWatch` decides when the wait gives up.
"""

from __future__ import annotations

import asyncio
import time

from agentpool.broker import Checkout
from agentpool.io.agents import AgentClient, AgentStatus
from agentpool.pool.restoring import IdleWatch


async def wait_until_idle(
    agents: AgentClient,
    checkout: Checkout,
    token: str,
    *,
    watch: IdleWatch,
    poll_seconds: float,
    status_timeout: float | None = None,
    item: str | None = None,
) -> AgentStatus | None:
    """Ask the checked-out agent ``GET /status`` every ``poll_seconds`` until it reports idle,
    or with ``item`` until that item is no longer among its busy slots (that answer); None once
    it is lost or ``watch`` gives up."""
    timeout = {} if status_timeout is None else {"timeout": status_timeout}
    current: IdleWatch | None = watch
    while current is not None and not checkout.is_lost and current.open(time.monotonic()):
        status = await agents.status(checkout.endpoint, token, **timeout)
        if status is not None and (not status.busy or _done(item, status)):
            return status
        current = current.heard(answered=status is not None, now=time.monotonic())
        if current is not None:
            await asyncio.sleep(poll_seconds)
    return None


def _done(item: str | None, status: AgentStatus) -> bool:
    """The agent names its busy items and ``item`` is not among them."""
    return item is not None and bool(status.items) and item not in map(str, status.items)
