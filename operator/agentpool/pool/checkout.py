"""Checkout order: which idle agent a checkout gets, and which waiter is served first.

LIFO hands out the agent returned most recently, so the others stay idle long enough for the
overflow to time out and the pool to shrink; FIFO hands out the agent idle longest, spreading the
load. Waiters are served by priority, higher first, then by when each began waiting, then in
arrival order. The broker calls these on every checkout and checkin; the planner and the tests
call them too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol, TypeVar

from agentpool.api import Strategy
from agentpool.pool.observed import ObservedAgent, Waiter
from agentpool.pool.policy import PoolPolicy
from agentpool.pool.recycling import retirement_reason

T = TypeVar("T")


class Queued(Protocol):
    """Anything served in waiter order: a :class:`Waiter`, or the broker's own record of one."""

    @property
    def priority(self) -> int: ...
    @property
    def seq(self) -> int: ...
    @property
    def since(self) -> float | None: ...


def available_agents(
    policy: PoolPolicy,
    agents: Iterable[ObservedAgent],
    *,
    now: float | None = None,
) -> list[ObservedAgent]:
    """The agents a checkout may take, in the order the strategy hands them out.

    An agent qualifies when it is idle (Ready, free, sound) and not due for retirement, so an
    agent that wore out or is outdated is not handed out in the window before it is deleted.
    """
    idle = [agent for agent in agents if is_available(policy, agent, now=now)]
    idle.sort(key=idle_key)
    return list(handout_order(policy.strategy, idle))


def is_available(policy: PoolPolicy, agent: ObservedAgent, *, now: float | None = None) -> bool:
    """The agent is idle (Ready, free, sound) and not due for retirement."""
    return agent.idle and retirement_reason(policy, agent, now) is None


def idle_key(agent: ObservedAgent) -> tuple[float, int, str]:
    """Sort key of the idle order, oldest idle first; FIFO takes the smallest, LIFO the largest.

    Agents with equal stamps go in the order they fell idle, then by name, so the order is
    total and the same on every call.
    """
    return (_idle_stamp(agent), agent.idle_seq, agent.name)


def handout_order(strategy: Strategy, idle: Sequence[T]) -> Iterator[T]:
    """Agents kept in idle order (by :func:`idle_key`, oldest first) in the order the strategy
    hands them out: LIFO from the newest end, FIFO from the oldest."""
    return reversed(idle) if strategy == "LIFO" else iter(idle)


def first_available(
    policy: PoolPolicy, candidates: Iterable[ObservedAgent], *, now: float | None = None
) -> ObservedAgent | None:
    """The first of ``candidates`` (in hand-out order) a checkout may take, if any."""
    for agent in candidates:
        if is_available(policy, agent, now=now):
            return agent
    return None


def choose_agent(
    policy: PoolPolicy,
    agents: Iterable[ObservedAgent],
    *,
    now: float | None = None,
) -> str | None:
    """The name of the agent the next checkout gets, or None when none is available."""
    ordered = sorted(agents, key=idle_key)
    chosen = first_available(policy, handout_order(policy.strategy, ordered), now=now)
    return chosen.name if chosen is not None else None


def waiter_key(waiter: Queued) -> tuple[int, float, int]:
    """Sort key of the waiter order: priority descending, then when the wait began, then arrival.

    A wait may begin before its checkout reaches the pool: a run's first checkouts wait from when
    the run arrived, so the time it took to start does not put it behind runs that came after
    it. A waiter with no start stamp counts as waiting from the beginning.
    """
    return (-waiter.priority, waiter.since or 0.0, waiter.seq)


def order_waiters(waiters: Iterable[Waiter]) -> list[Waiter]:
    """Waiters in the order they are served: priority descending, then when the wait began,
    then arrival."""
    return sorted(waiters, key=waiter_key)


def _idle_stamp(agent: ObservedAgent) -> float:
    if agent.idle_since is not None:
        return agent.idle_since
    if agent.ready_at is not None:
        return agent.ready_at
    return agent.created_at
