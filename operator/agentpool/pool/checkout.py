"""Checkout order: which idle agent a checkout gets, and which waiter is served first.

LIFO hands out the agent returned most recently, so the others stay idle long enough for the
overflow to time out and the pool to shrink; FIFO hands out the agent idle longest, spreading the
load. Waiters are served by priority, higher first, then by when each began waiting, then in
arrival order. The broker calls these on every checkout and checkin; the planner and the tests
call them too.

An agent with several slots is handed out while it has a free slot, and the order between
agents counts from when each was last touched (a slot taken or freed): so LIFO keeps handing
out the agent it just handed out, filling it before it opens another, and FIFO hands out the one
touched longest ago, spreading items across agents. A lease takes a whole agent (``whole``):
only one with no slot busy.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

from agentpool.api import Strategy
from agentpool.pool.observed import ObservedAgent, Waiter
from agentpool.pool.policy import PoolPolicy
from agentpool.pool.recycling import due_reason, outdated

T = TypeVar("T")


def available_agents(
    policy: PoolPolicy,
    agents: Iterable[ObservedAgent],
    *,
    now: float | None = None,
    whole: bool = False,
) -> list[ObservedAgent]:
    """The agents a checkout may take, in the order the strategy hands them out, those on the
    pool's current template first.

    An agent qualifies when it is Ready and sound with a free slot (with ``whole``, with no
    slot busy) and not due for retirement, so an agent that wore out, or is outdated and holds
    work, takes no new item in the window before it is deleted, even while other slots finish
    theirs.
    """
    idle = [agent for agent in agents if is_available(policy, agent, now=now, whole=whole)]
    idle.sort(key=idle_key)
    # Current agents before outdated ones, so that a rollout's outdated agents fall idle.
    return sorted(handout_order(policy.strategy, idle), key=lambda agent: outdated(policy, agent))


def is_available(
    policy: PoolPolicy, agent: ObservedAgent, *, now: float | None = None, whole: bool = False
) -> bool:
    """The agent could take an item now (with ``whole``, a lease of all its slots): Ready and
    sound with a free slot (or none busy), and not due for retirement."""
    if not (agent.idle if whole else agent.open):
        return False
    return due_reason(policy, agent, now) is None


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
    policy: PoolPolicy,
    candidates: Iterable[ObservedAgent],
    *,
    now: float | None = None,
    whole: bool = False,
) -> ObservedAgent | None:
    """The first of ``candidates`` (in hand-out order) a checkout may take, if any, an agent on
    the pool's current template before an outdated one: during a rollout the outdated agents
    serve only when no current one is free, so they fall idle and the rollout can retire them
    even under a steady load."""
    fallback = None
    for agent in candidates:
        if is_available(policy, agent, now=now, whole=whole):
            if not outdated(policy, agent):
                return agent
            fallback = fallback or agent
    return fallback


def waiter_key(waiter: Waiter) -> tuple[int, float, int]:
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
