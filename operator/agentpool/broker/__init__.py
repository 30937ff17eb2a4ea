"""Each pool's checkout service inside the operator: who holds which agent, who waits for one.

The broker is in-memory and asyncio-only: it receives observed agents as values from the
AgentPool reconciler and leaves choices (which agent, which waiter) to `agentpool.pool`. The
run engine and the lease controller check agents out of it and back in; the words of a
checkout's end (:class:`~agentpool.pool.checkin.CheckinOutcome`, ``CheckoutTimedOut`` and the rest)
are :mod:`agentpool.pool.checkin`'s.
"""

from agentpool.broker.broker import Broker
from agentpool.broker.handles import Checkout
from agentpool.broker.registry import Brokers, PoolKey

__all__ = [
    "Broker",
    "Brokers",
    "Checkout",
    "PoolKey",
]
