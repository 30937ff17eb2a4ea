"""Each pool's checkout service inside the operator: who holds which agent, who waits for one.

The broker is in-memory and asyncio-only: it receives observed agents as values from the
AgentPool reconciler and leaves choices (which agent, which waiter) to `agentpool.pool`. The
run engine and the lease controller check agents out of it and back in.
"""

from agentpool.broker.broker import Broker
from agentpool.broker.handles import Checkout
from agentpool.broker.registry import Brokers, PoolKey
from agentpool.pool.checkin import CheckinOutcome, CheckoutFailed, PoolClosed, PoolExhausted

__all__ = [
    "Broker",
    "Brokers",
    "CheckinOutcome",
    "Checkout",
    "CheckoutFailed",
    "PoolClosed",
    "PoolExhausted",
    "PoolKey",
]
