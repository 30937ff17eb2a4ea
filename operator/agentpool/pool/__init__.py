"""The pure core of a pool: policy, checkout order, scaling plans, recycling and status.

Nothing here does I/O, reads a clock or logs: every function takes what was observed and `now`
and returns a value. The broker and the AgentPool reconciler call it; the tests drive it with a
fake clock.
"""

from agentpool.api.conditions import ConditionView
from agentpool.pool.checkout import available_agents, order_waiters
from agentpool.pool.observed import ObservedAgent, Waiter
from agentpool.pool.plan import Plan, Retirement, desired_size, plan
from agentpool.pool.policy import PoolPolicy
from agentpool.pool.recycling import retirement_reason
from agentpool.pool.sizing import DemandSample, SizingAdvice, recommend
from agentpool.pool.status import PoolStatusView, compute_status, state_name

__all__ = [
    "ConditionView",
    "DemandSample",
    "ObservedAgent",
    "Plan",
    "PoolPolicy",
    "PoolStatusView",
    "Retirement",
    "SizingAdvice",
    "Waiter",
    "available_agents",
    "compute_status",
    "desired_size",
    "order_waiters",
    "plan",
    "recommend",
    "retirement_reason",
    "state_name",
]
