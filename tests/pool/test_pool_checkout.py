"""Checkout order: LIFO and FIFO hand out exactly the agent they promise; waiters by priority."""

from __future__ import annotations

import pytest
from choosing import choose_agent

from agentpool.api import Strategy
from agentpool.pool import ObservedAgent, PoolPolicy, Waiter, order_waiters
from agentpool.pool.checkout import available_agents, first_available, handout_order, waiter_key


def _idle(name: str, idle_since: float, **fields: object) -> ObservedAgent:
    return ObservedAgent(name=name, ready=True, ready_at=0.0, idle_since=idle_since, **fields)  # type: ignore[arg-type]


AGENTS = (
    _idle("a", 10.0),
    _idle("b", 30.0),
    _idle("c", 20.0),
)


@pytest.mark.parametrize(
    ("strategy", "order"),
    [("LIFO", ["b", "c", "a"]), ("FIFO", ["a", "c", "b"])],
)
def test_strategy_orders_idle_agents(strategy: str, order: list[str]) -> None:
    """LIFO hands out the most recently returned first, FIFO the longest idle first."""
    policy = PoolPolicy(min_size=3, max_size=3, strategy=strategy)  # type: ignore[arg-type]
    assert [agent.name for agent in available_agents(policy, AGENTS)] == order
    assert choose_agent(policy, AGENTS) == order[0]


@pytest.mark.parametrize(
    ("excluded", "why"),
    [
        (ObservedAgent("x", ready=True, busy=True, idle_since=99.0), "busy"),
        (ObservedAgent("x", ready=False, idle_since=99.0), "not Ready"),
        (ObservedAgent("x", ready=True, failed=True, idle_since=99.0), "failed"),
        (ObservedAgent("x", ready=True, deleting=True, idle_since=99.0), "being deleted"),
        (ObservedAgent("x", ready=True, lost=True, idle_since=99.0), "lost"),
        (ObservedAgent("x", ready=True, reset_failed=True, idle_since=99.0), "reset failed"),
        (ObservedAgent("x", ready=True, uses=5, idle_since=99.0), "worn out (maxUses)"),
        (
            ObservedAgent("x", ready=True, quarantined=True, idle_since=99.0),
            "quarantined",
        ),
    ],
)
def test_unfit_agent_is_never_chosen(excluded: ObservedAgent, why: str) -> None:
    """An agent that is not idle and sound is skipped even though LIFO would pick it first."""
    policy = PoolPolicy(min_size=1, max_size=2, max_uses=5, template_hash="")
    fine = ObservedAgent("a", ready=True, idle_since=1.0)
    assert choose_agent(policy, [fine, excluded]) == "a", why


def test_max_lifetime_excludes_only_with_a_clock() -> None:
    """An agent past maxLifetimeSeconds is not handed out when `now` is known."""
    policy = PoolPolicy(max_lifetime_seconds=100.0)
    old = ObservedAgent("old", created_at=0.0, ready=True, idle_since=50.0)
    assert choose_agent(policy, [old], now=99.0) == "old"
    assert choose_agent(policy, [old], now=100.0) is None


def test_none_available() -> None:
    """With no idle agent, there is nothing to choose."""
    policy = PoolPolicy()
    assert choose_agent(policy, []) is None
    assert choose_agent(policy, [ObservedAgent("a", ready=True, busy=True)]) is None


@pytest.mark.parametrize("strategy", ["LIFO", "FIFO"])
def test_equal_stamps_follow_idle_sequence(strategy: str) -> None:
    """Agents that fell idle at the same instant are ordered by the sequence they fell idle in."""
    policy = PoolPolicy(strategy=strategy)  # type: ignore[arg-type]
    agents = [_idle("z", 5.0, idle_seq=1), _idle("y", 5.0, idle_seq=2)]
    assert choose_agent(policy, agents) == ("y" if strategy == "LIFO" else "z")


def test_never_returned_agent_ranks_by_ready_time() -> None:
    """An agent never checked out counts as idle since it became Ready."""
    policy = PoolPolicy(strategy="FIFO")
    early = ObservedAgent("early", ready=True, ready_at=1.0)
    late = ObservedAgent("late", ready=True, ready_at=2.0)
    assert choose_agent(policy, [late, early]) == "early"


@pytest.mark.parametrize(
    ("waiters", "order"),
    [
        ([Waiter(0, 1), Waiter(0, 2), Waiter(0, 3)], [1, 2, 3]),
        ([Waiter(0, 1), Waiter(5, 2), Waiter(1, 3)], [2, 3, 1]),
        ([Waiter(1, 4), Waiter(1, 2), Waiter(-1, 1), Waiter(1, 3)], [2, 3, 4, 1]),
        ([], []),
    ],
)
def test_waiters_by_priority_then_arrival(waiters: list[Waiter], order: list[int]) -> None:
    """Higher priority first; within a priority, first come first served."""
    assert [waiter.seq for waiter in order_waiters(waiters)] == order


@pytest.mark.parametrize(
    ("strategy", "order"),
    [("LIFO", ["c", "b", "a"]), ("FIFO", ["a", "b", "c"])],
)
def test_handout_order_reads_the_idle_order_from_the_strategy_end(
    strategy: Strategy, order: list[str]
) -> None:
    """The broker keeps agents oldest idle first; the strategy says which end goes out first."""
    assert list(handout_order(strategy, ["a", "b", "c"])) == order


@pytest.mark.parametrize(
    ("candidates", "chosen"),
    [
        ([], None),
        ([ObservedAgent("busy", ready=True, busy=True)], None),
        ([ObservedAgent("busy", ready=True, busy=True), ObservedAgent("b", ready=True)], "b"),
        ([ObservedAgent("a", ready=True), ObservedAgent("b", ready=True)], "a"),
        ([ObservedAgent("worn", ready=True, uses=3), ObservedAgent("b", ready=True)], "b"),
    ],
)
def test_first_available_skips_what_a_checkout_may_not_take(
    candidates: list[ObservedAgent], chosen: str | None
) -> None:
    """The first agent in hand-out order that is idle and not due for retirement is taken."""
    policy = PoolPolicy(min_size=1, max_size=3, max_uses=3)
    found = first_available(policy, candidates)
    assert (found.name if found is not None else None) == chosen


@pytest.mark.parametrize(
    ("first", "second", "first_goes_first"),
    [
        (Waiter(priority=1, seq=2), Waiter(priority=0, seq=1), True),
        (Waiter(priority=0, seq=1), Waiter(priority=0, seq=2), True),
        (Waiter(priority=0, seq=2), Waiter(priority=0, seq=1), False),
        (Waiter(priority=-1, seq=1), Waiter(priority=0, seq=9), False),
    ],
)
def test_waiter_key_orders_by_priority_then_arrival(
    first: Waiter, second: Waiter, first_goes_first: bool
) -> None:
    """The broker's waiter heap and order_waiters share this key."""
    assert (waiter_key(first) < waiter_key(second)) is first_goes_first


@pytest.mark.parametrize(
    ("first", "second", "first_goes_first"),
    [
        (Waiter(0, seq=2, since=10.0), Waiter(0, seq=1, since=11.0), True),
        (Waiter(0, seq=1, since=11.0), Waiter(0, seq=2, since=10.0), False),
        (Waiter(1, seq=2, since=12.0), Waiter(0, seq=1, since=10.0), True),
        (Waiter(0, seq=1, since=10.0), Waiter(0, seq=2, since=10.0), True),
    ],
)
def test_waiter_key_orders_by_when_the_wait_began_within_a_priority(
    first: Waiter, second: Waiter, first_goes_first: bool
) -> None:
    """A waiter that began waiting earlier (a run created before another, whose first checkout
    reached the pool later) goes first within its priority; equal starts go by arrival."""
    assert (waiter_key(first) < waiter_key(second)) is first_goes_first
