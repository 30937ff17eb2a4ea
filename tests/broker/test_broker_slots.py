"""The broker with several slots per agent: an agent is handed out once per free slot, the next
checkout waits, a checkin frees one slot, a lease takes a whole agent, and recycling waits for
every slot to be free."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter

import pytest
from test_broker_checkout import FakeClock, agent, make_broker

from agentpool.broker import Broker
from agentpool.pool import plan
from agentpool.pool.checkin import CheckoutTimedOut
from brokerwait import queued, wait_until


async def test_one_agent_serves_up_to_its_slots_then_checkouts_wait() -> None:
    """Four checkouts of a one-agent pool with four slots get the same agent at once; the fifth
    waits, and a checkin frees a slot for it."""
    broker = make_broker(["a"], slots=4)
    held = [await broker.checkout(timeout=0, holder=f"run/{n}") for n in range(4)]
    assert {checkout.agent for checkout in held} == {"a"}
    assert len({checkout.serial for checkout in held}) == 4
    (view,) = broker.agents()
    assert (view.busy, view.busy_slots, view.free_slots) == (True, 4, 0)
    with pytest.raises(CheckoutTimedOut, match="4 of 4 slots busy"):
        await broker.checkout(timeout=0, holder="run/none")
    fifth = asyncio.create_task(broker.checkout(timeout=5, holder="run/5"))
    await wait_until(broker, queued(broker, 1))
    assert broker.checkin(held[0])
    assert (await fifth).agent == "a"
    assert broker.counts()["busy_slots"] == 4


async def test_a_second_checkin_of_one_slot_frees_nothing_more() -> None:
    """Each handle holds one slot: checking it in twice does not free another's."""
    broker = make_broker(["a"], slots=2)
    first = await broker.checkout(timeout=0, holder="run/1")
    await broker.checkout(timeout=0, holder="run/2")
    assert broker.checkin(first)
    assert not broker.checkin(first)
    assert broker.counts()["busy_slots"] == 1


@pytest.mark.parametrize(("strategy", "spread"), [("LIFO", [4, 0]), ("FIFO", [2, 2])])
async def test_lifo_fills_an_agent_fifo_spreads(strategy: str, spread: list[int]) -> None:
    """With free slots on two agents, LIFO keeps handing out the agent it just handed out, FIFO
    the one touched longest ago."""
    clock = FakeClock()
    broker = make_broker(["a", "b"], clock=clock, slots=4, strategy=strategy)
    counts: Counter[str] = Counter()
    for n in range(4):
        clock.tick()
        counts[(await broker.checkout(timeout=0, holder=f"run/{n}")).agent] += 1
    assert sorted(counts.values(), reverse=True) + [0] * (2 - len(counts)) == spread


async def test_a_lease_waits_for_a_whole_agent_and_holds_every_slot() -> None:
    """A lease is not handed an agent serving an item; once it is free, the lease holds it whole
    and no item gets a slot of it."""
    broker = make_broker(["a"], slots=4)
    item = await broker.checkout(timeout=0, holder="run/1")
    lease = asyncio.create_task(broker.checkout(timeout=5, holder="lease:l", whole=True))
    await wait_until(broker, queued(broker, 1))
    assert not lease.done()
    broker.checkin(item)
    held = await lease
    assert held.agent == "a"
    assert broker.agents()[0].busy_slots == 4
    with pytest.raises(CheckoutTimedOut):
        await broker.checkout(timeout=0, holder="run/2")
    broker.checkin(held)
    assert (await broker.checkout(timeout=0, holder="run/3")).agent == "a"


async def test_a_waiting_lease_grows_the_pool_though_slots_are_free() -> None:
    """A lease queued behind an agent serving one item of four is reported as waiting whole, so
    the plan creates an agent for it rather than counting the three free slots."""
    broker = make_broker(["a"], slots=4, max_size=2)
    item = await broker.checkout(timeout=0, holder="run/1")
    lease = asyncio.create_task(broker.checkout(timeout=5, holder="lease:l", whole=True))
    await wait_until(broker, queued(broker, 1))
    (waiter,) = broker.waiters()
    assert waiter.whole
    assert plan(broker.policy, broker.agents(), broker.waiters(), 0.0).create == 1
    broker.checkin(item)
    assert (await lease).agent == "a"


async def test_max_uses_counts_items_and_retires_once_every_slot_is_free() -> None:
    """maxUses 3 on an agent of four slots: the fourth checkout waits, the agent is never retired
    while a slot is busy, and it is retired for MaxUses once all are back."""
    clock = FakeClock()
    broker = make_broker(["a"], clock=clock, slots=4, max_uses=3)
    held = [await broker.checkout(timeout=0, holder=f"run/{n}") for n in range(3)]
    with pytest.raises(CheckoutTimedOut):
        await broker.checkout(timeout=0, holder="run/late")
    for checkout in held[:2]:
        broker.checkin(checkout)
        assert broker.retire(["a"]) == ()
        decided = plan(broker.policy, broker.agents(), broker.waiters(), clock.now)
        assert decided.retire == ()
    broker.changed.clear()
    broker.checkin(held[2])
    assert broker.changed.is_set()
    decided = plan(broker.policy, broker.agents(), broker.waiters(), clock.now)
    assert [(r.name, str(r.reason)) for r in decided.retire] == [("a", "MaxUses")]
    assert broker.retire(["a"]) == ("a",)


async def test_a_failed_pod_loses_every_holder_of_its_slots() -> None:
    """Every item on an agent whose pod fails learns its agent is lost."""
    broker = make_broker(["a"], slots=3)
    held = [await broker.checkout(timeout=0, holder=f"run/{n}") for n in range(3)]
    broker.update_agents([agent("a", failed=True)])
    assert all(checkout.is_lost for checkout in held)
    assert broker.counts()["busy_slots"] == 0


async def test_restore_holds_one_slot_per_item_and_leaves_the_rest() -> None:
    """After a restart an agent reporting two items has two slots held and two to hand out."""
    broker = Broker("p", make_broker([], slots=4).policy, clock=FakeClock())
    broker.update_agents([agent("a")])
    restored = [broker.restore_busy("a", item, whole=False) for item in ("x", "y")]
    assert all(checkout is not None for checkout in restored)
    assert broker.agents()[0].busy_slots == 2
    more = [await broker.checkout(timeout=0, holder=f"run/{n}") for n in range(2)]
    assert {checkout.agent for checkout in more} == {"a"}
    assert broker.restore_busy("a", "z", whole=False) is None


async def test_a_raised_slot_count_opens_the_held_agents_at_once() -> None:
    """Raising slots from 1 to 2 on a pool whose one agent is busy lets the next checkout have
    its second slot; lowering it back keeps a third from being handed out."""
    broker = make_broker(["a"])
    await broker.checkout(timeout=0, holder="run/1")
    with pytest.raises(CheckoutTimedOut):
        await broker.checkout(timeout=0, holder="run/2")
    broker.update_policy(dataclasses.replace(broker.policy, slots=2))
    assert (await broker.checkout(timeout=0, holder="run/2")).agent == "a"
    broker.update_policy(dataclasses.replace(broker.policy, slots=1))
    with pytest.raises(CheckoutTimedOut):
        await broker.checkout(timeout=0, holder="run/3")
