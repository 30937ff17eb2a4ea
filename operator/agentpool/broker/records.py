"""The broker's bookkeeping records: one per agent, one per waiting checkout.

Kept apart from :mod:`agentpool.broker.broker`, which alone creates and changes them, so that
module reads as the checkout service itself.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from agentpool.broker.handles import Checkout
from agentpool.pool import ObservedAgent
from agentpool.pool.checkout import waiter_key


@dataclass(eq=False)
class AgentRecord:
    """The broker's bookkeeping for one agent beside the pod facts it was last told."""

    pod: ObservedAgent
    holder: Checkout | None = None
    uses: int = 0
    consecutive_failures: int = 0
    idle_since: float | None = None
    idle_seq: int = 0
    lost: bool = False
    reset_failed: bool = False
    quarantined: bool = False
    retired: bool = False
    key: tuple[float, int, str] = (0.0, 0, "")


@dataclass(eq=False)
class WaiterRecord:
    """One waiting checkout; the broker's heap keeps them in the pool core's waiter order."""

    priority: int
    seq: int
    holder: str
    since: float
    future: asyncio.Future[Checkout] = field(repr=False)
    gone: bool = False

    def __lt__(self, other: WaiterRecord) -> bool:
        return waiter_key(self) < waiter_key(other)
