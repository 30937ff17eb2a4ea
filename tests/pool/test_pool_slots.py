"""Agents with several slots: which agent a checkout gets, how big the pool grows, and that an
agent with a busy slot is never retired, however worn out it is."""

from __future__ import annotations

import pytest
from choosing import choose_agent, free_slots

from agentpool.api.reasons import RetireReason
from agentpool.pool import ObservedAgent, PoolPolicy, Waiter, desired_size, plan
from agentpool.pool.checkout import available_agents, is_available
from agentpool.pool.recycling import due_reason, retirement_reason
from agentpool.pool.status import compute_status


def _agent(name: str, since: float, busy_slots: int = 0, slots: int = 4, **fields: object):  # type: ignore[no-untyped-def]
    return ObservedAgent(
        name,
        ready=True,
        ready_at=0.0,
        idle_since=since,
        busy=busy_slots > 0,
        busy_slots=busy_slots,
        slots=slots,
        **fields,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("busy_slots", "slots", "item", "lease"),
    [
        (0, 1, True, True),
        (1, 1, False, False),
        (0, 4, True, True),
        (1, 4, True, False),
        (3, 4, True, False),
        (4, 4, False, False),
        (5, 4, False, False),  # more held than the pool now allows (slots lowered): full
    ],
)
def test_an_agent_takes_items_while_a_slot_is_free(
    busy_slots: int, slots: int, item: bool, lease: bool
) -> None:
    """An item may go to an agent with a free slot; a lease only to one with none busy."""
    policy = PoolPolicy(slots=slots)
    agent = _agent("a", 1.0, busy_slots, slots)
    assert is_available(policy, agent, now=5.0) is item
    assert is_available(policy, agent, now=5.0, whole=True) is lease


@pytest.mark.parametrize(
    ("strategy", "expected"),
    # a: touched at 10 with 3 of 4 busy; b: at 30 with 1 busy; c: at 20, idle; d: at 40, full.
    [("LIFO", ["b", "c", "a"]), ("FIFO", ["a", "c", "b"])],
)
def test_strategy_orders_agents_with_free_slots(strategy: str, expected: list[str]) -> None:
    """The strategy decides between agents with a free slot by when each was last touched; a
    full agent is skipped even where the strategy would take it first."""
    policy = PoolPolicy(min_size=4, max_size=4, strategy=strategy, slots=4)  # type: ignore[arg-type]
    agents = [_agent("a", 10.0, 3), _agent("b", 30.0, 1), _agent("c", 20.0), _agent("d", 40.0, 4)]
    assert [agent.name for agent in available_agents(policy, agents)] == expected
    assert choose_agent(policy, agents) == expected[0]


def test_a_lease_gets_the_agent_with_no_busy_slot() -> None:
    """LIFO would hand an item the partly busy agent, but a lease takes a whole one."""
    policy = PoolPolicy(min_size=2, max_size=2, slots=4)
    agents = [_agent("part", 30.0, 1), _agent("whole", 10.0)]
    assert choose_agent(policy, agents) == "part"
    assert choose_agent(policy, agents, whole=True) == "whole"


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"uses": 10}, RetireReason.MAX_USES),
        ({"created_at": 0.0}, RetireReason.MAX_LIFETIME),
        ({"quarantined": True}, RetireReason.QUARANTINED),
        ({"lost": True}, RetireReason.CALL_TIMED_OUT),
    ],
)
def test_a_due_agent_finishes_its_busy_slots_before_it_is_retired(
    fields: dict[str, object], reason: RetireReason
) -> None:
    """Worn out, too old, quarantined or lost with one slot of four busy: it takes no new item,
    the planner does not retire it, and once its last slot is free it goes for that reason."""
    policy = PoolPolicy(min_size=1, max_size=2, slots=4, max_uses=10, max_lifetime_seconds=100)
    busy = _agent("a", 1.0, 1, **fields)
    assert due_reason(policy, busy, 500.0) == reason
    assert not is_available(policy, busy, now=500.0)
    assert retirement_reason(policy, busy, 500.0) is None
    assert plan(policy, [busy], [], 500.0).retire == ()
    done = _agent("a", 1.0, 0, **fields)
    assert plan(policy, [done], [], 500.0).retired_names == ("a",)


@pytest.mark.parametrize(
    ("slots", "busy", "waiting", "min_idle", "desired"),
    [
        (1, 3, 2, 0, 5),  # one slot: busy agents plus waiters, as before slots
        (4, 8, 0, 0, 2),  # two full agents
        (4, 8, 1, 0, 3),  # one waiter beyond the free slots needs a third agent
        (4, 8, 4, 0, 3),  # four waiters fit in one more agent
        (4, 8, 5, 0, 4),
        (8, 3, 0, 1, 2),  # minIdle counts whole agents on top
        (4, 40, 40, 0, 10),  # capped at maxSize
    ],
)
def test_pool_grows_for_waiters_beyond_free_slots(
    slots: int, busy: int, waiting: int, min_idle: int, desired: int
) -> None:
    """Busy slots and waiters together need ceil(slots needed / slots) agents."""
    policy = PoolPolicy(min_size=1, max_size=10, slots=slots, min_idle=min_idle)
    assert desired_size(policy, busy=busy, waiting=waiting) == desired


def test_plan_creates_an_agent_only_when_the_slots_are_full() -> None:
    """Two agents of four slots with five items: a waiter is served by the free slots, so no
    pod is created until every slot is busy and a checkout still waits."""
    policy = PoolPolicy(min_size=2, max_size=4, slots=4)
    partly = [_agent("a", 1.0, 4), _agent("b", 2.0, 1)]
    assert plan(policy, partly, [Waiter(priority=0, seq=1)], 10.0).create == 0
    full = [_agent("a", 1.0, 4), _agent("b", 2.0, 4)]
    assert plan(policy, full, [Waiter(priority=0, seq=1)], 10.0).create == 1


def test_status_counts_slots() -> None:
    """The pool reports its Ready agents' slots and how many are busy; an agent with a free
    slot counts as available."""
    policy = PoolPolicy(min_size=3, max_size=3, slots=4)
    agents = [_agent("a", 1.0, 4), _agent("b", 2.0, 1), ObservedAgent("c", ready=False)]
    view = compute_status(policy, agents, [], 10.0)
    assert (view.slots, view.busy_slots, view.busy, view.available) == (8, 5, 2, 1)
    assert free_slots(policy, agents, now=10.0) == 3
    assert view.state == "Ready"


@pytest.mark.parametrize(
    ("fields", "slots", "create"),
    [
        ({"uses": 10}, 4, 1),  # worn out: its three free slots take nothing
        ({"quarantined": True}, 4, 1),
        ({}, 4, 0),  # sound: the waiter takes one of its free slots
        ({"uses": 10}, 1, 1),  # one slot, as before slots
    ],
)
def test_a_due_agent_is_no_capacity_for_waiters(
    fields: dict[str, object], slots: int, create: int
) -> None:
    """A due agent finishing one busy slot takes no new item, so a waiter gets a new agent in
    the overflow, as it would with one slot per agent."""
    policy = PoolPolicy(min_size=1, max_size=2, slots=slots, max_uses=10, template_hash="new")
    agent = _agent("a", 1.0, 1, slots, **{"template_hash": "new", **fields})
    waiter = Waiter(priority=0, seq=1)
    assert plan(policy, [agent], [waiter], 10.0).create == create
    message = compute_status(policy, [agent], [waiter], 10.0).conditions[0].message
    assert message.startswith(f"1 of {1 + create} ")


def test_the_pool_shrinks_once_the_due_agent_is_retired() -> None:
    """After the overflow agent takes the waiter and the due agent's last slot is free, the due
    agent goes and nothing replaces it: one agent serves the one item."""
    policy = PoolPolicy(min_size=1, max_size=2, slots=4, max_uses=10)
    due = _agent("a", 1.0, 0, uses=10)
    fresh = _agent("b", 5.0, 1)
    step = plan(policy, [due, fresh], [], 10.0)
    assert step.retired_names == ("a",)
    assert step.create == 0


def test_a_waiting_lease_needs_a_whole_agent() -> None:
    """A lease waits for an agent with no slot busy: the free slots of a partly busy agent do
    not serve it, so a pod is created for it, where an item would take a free slot."""
    policy = PoolPolicy(min_size=1, max_size=2, slots=4)
    agent = _agent("a", 1.0, 1)
    assert plan(policy, [agent], [Waiter(priority=0, seq=1, whole=True)], 10.0).create == 1
    assert plan(policy, [agent], [Waiter(priority=0, seq=1)], 10.0).create == 0


@pytest.mark.parametrize(
    ("slots", "busy_slots", "waiting", "demand"),
    [
        (1, 1, 4, 5),  # one slot: a busy agent and four waiters want five agents
        (4, 1, 4, 2),  # four slots: one slot busy and four waiting fill two agents
        (4, 4, 0, 1),
        (4, 0, 0, 0),
        (4, 5, 0, 2),
    ],
)
def test_recommendation_counts_demand_in_agents(
    slots: int, busy_slots: int, waiting: int, demand: int
) -> None:
    """The recommended sizes are agents: busy slots and waiting checkouts are divided by the
    slots of an agent, not added as though each were an agent."""
    policy = PoolPolicy(min_size=1, max_size=8, slots=slots)
    agents = []
    left = busy_slots
    for n in range(-(-busy_slots // slots) or 1):
        taken = min(left, slots)
        left -= taken
        agents.append(_agent(f"a{n}", 1.0, taken, slots))
    waiters = [Waiter(priority=0, seq=n) for n in range(waiting)]
    view = compute_status(policy, agents, waiters, 10.0)
    assert view.recommendation is not None
    assert (view.recommendation.peak_demand, view.recommendation.max_size) == (demand, demand)
