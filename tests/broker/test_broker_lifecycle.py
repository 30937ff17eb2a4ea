"""Retirement, lost agents and the registry: the broker and the reconciler never race."""

from __future__ import annotations

import asyncio
import dataclasses
import random

import pytest

from agentpool.broker import Broker, Brokers
from agentpool.broker.records import AgentRecord
from agentpool.pool import ObservedAgent, PoolPolicy, plan
from agentpool.pool.checkin import CheckinOutcome, CheckoutTimedOut, PoolClosed


def agent(name: str, **fields: object) -> ObservedAgent:
    values: dict[str, object] = {"created_at": 0.0, "ready": True, "ready_at": 1.0}
    values.update(fields)
    return ObservedAgent(name=name, **values)  # type: ignore[arg-type]


def make_broker(names: list[str], **policy: object) -> Broker:
    fields: dict[str, object] = {"min_size": len(names), "max_size": len(names)}
    fields.update(policy)
    broker = Broker("p", PoolPolicy(**fields), clock=lambda: 100.0)  # type: ignore[arg-type]
    broker.update_agents([agent(name) for name in names])
    return broker


async def test_retire_removes_idle_agents_but_never_busy_ones() -> None:
    """retire() returns the idle agents it removed and leaves busy ones with their holders."""
    broker = make_broker(["a", "b", "c"], strategy="FIFO")
    held = await broker.checkout(timeout=1, holder="h")
    assert broker.retire([held.agent, "b", "unknown"]) == ("b",)
    views = {view.name: view for view in broker.agents()}
    assert views["b"].deleting
    assert views[held.agent].busy
    assert not views[held.agent].deleting
    remaining = {"a", "b", "c"} - {held.agent, "b"}
    assert (await broker.checkout(timeout=1, holder="h")).agent in remaining
    with pytest.raises(CheckoutTimedOut):
        await broker.checkout(timeout=0, holder="h")


@pytest.mark.parametrize("seed", range(20))
async def test_retire_and_checkout_race_never_both(seed: int) -> None:
    """However retire and checkouts interleave, an agent is either retired or handed out."""
    rng = random.Random(seed)
    names = [f"a{i}" for i in range(3)]
    broker = make_broker(names)
    results: dict[str, list[str]] = {"retired": [], "handed": []}

    async def checkout_one() -> None:
        for _ in range(rng.randint(0, 2)):
            await asyncio.sleep(0)  # shuffle the interleaving, not a wait
        try:
            handle = await broker.checkout(timeout=0, holder="h")
        except CheckoutTimedOut:
            return
        results["handed"].append(handle.agent)

    async def retire_some() -> None:
        for _ in range(rng.randint(0, 2)):
            await asyncio.sleep(0)
        results["retired"].extend(broker.retire(rng.sample(names, rng.randint(1, 3))))

    await asyncio.gather(*(checkout_one() for _ in range(3)), retire_some())
    assert not set(results["handed"]) & set(results["retired"])
    assert len(results["handed"]) == len(set(results["handed"]))


async def test_planned_retirements_go_through_retire() -> None:
    """The planner's retirements, applied through retire(), leave every busy agent alone."""
    broker = make_broker(["a", "b", "c"], min_size=1, max_size=3, idle_timeout_seconds=0)
    held = await broker.checkout(timeout=1, holder="h")
    result = plan(broker.policy, broker.agents(), broker.waiters(), 100.0)
    removed = broker.retire(result.retired_names)
    assert held.agent not in removed
    assert set(removed) == set(result.retired_names)
    assert len(removed) == 2


async def test_busy_agent_whose_pod_fails_is_lost_to_its_holder() -> None:
    """A held agent whose pod fails sets the holder's lost signal; its checkin is then a no-op."""
    broker = make_broker(["a", "b"])
    handle = await broker.checkout(timeout=1, holder="h")
    other = "b" if handle.agent == "a" else "a"
    lost = asyncio.create_task(handle.wait_lost())
    broker.update_agents([agent(handle.agent, failed=True, ready=False), agent(other)])
    async with asyncio.timeout(5):
        reason = await lost
    assert handle.is_lost
    assert "failed" in reason
    assert handle.agent in reason
    assert broker.changed.is_set()
    assert not broker.checkin(handle, CheckinOutcome.SUCCESS)
    view = {v.name: v for v in broker.agents()}[handle.agent]
    assert not view.busy
    assert view.lost


async def test_a_lost_agent_calls_its_holders_callbacks_once() -> None:
    """A holder racing its call registers a callback: it runs once when the pod fails, at once
    for a handle already lost, and never after the holder removed it."""
    broker = make_broker(["a", "b", "c"])
    first = await broker.checkout(timeout=1, holder="first")
    second = await broker.checkout(timeout=1, holder="second")
    calls: list[str] = []
    first.on_lost(lambda: calls.append("first"))
    remove = second.on_lost(lambda: calls.append("second"))
    remove()
    gone = {first.agent, second.agent}
    broker.update_agents(
        [agent(name, failed=name in gone, ready=name not in gone) for name in ("a", "b", "c")]
    )
    broker.update_agents(
        [agent(name, failed=name in gone, ready=name not in gone) for name in ("a", "b", "c")]
    )
    assert calls == ["first"]
    first.on_lost(lambda: calls.append("late"))
    assert calls == ["first", "late"]


async def test_busy_agent_whose_pod_vanishes_is_lost() -> None:
    """A held agent whose pod disappears from the observed set is lost to its holder."""
    broker = make_broker(["a"])
    handle = await broker.checkout(timeout=1, holder="h")
    broker.update_agents([])
    assert handle.is_lost
    assert "deleted" in (handle.lost_reason or "")
    assert broker.agents() == ()


async def test_forget_agent_signals_its_holder() -> None:
    """Dropping one pod by name loses it to its holder as well."""
    broker = make_broker(["a"])
    handle = await broker.checkout(timeout=1, holder="h")
    broker.forget_agent("a")
    assert handle.is_lost


async def test_waiter_queued_sets_changed_and_calls_back() -> None:
    """A waiter that queues wakes the reconciler, by event and by callback."""
    calls: list[int] = []
    broker = Broker("p", PoolPolicy(min_size=0, max_size=2), on_change=lambda: calls.append(1))
    task = asyncio.create_task(broker.checkout(timeout=5, holder="h"))
    async with asyncio.timeout(5):
        await broker.changed.wait()
    assert calls
    assert [w.holder for w in broker.waiters()] == ["h"]
    assert plan(broker.policy, broker.agents(), broker.waiters(), 0.0).create == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_restarted_reconciler_takes_over_the_callback() -> None:
    """ensure() from a restarted reconcile loop keeps the broker (and its waiters) but calls the
    new loop back, so waiters that queue later still wake it."""
    brokers = Brokers(clock=lambda: 0.0)
    policy = PoolPolicy(min_size=0, max_size=1)
    old: list[int] = []
    new: list[int] = []
    broker = brokers.ensure("ns", "p", policy, on_change=lambda: old.append(1))
    assert brokers.ensure("ns", "p", policy, on_change=lambda: new.append(1)) is broker
    task = asyncio.create_task(broker.checkout(timeout=5, holder="h"))
    async with asyncio.timeout(5):
        await broker.changed.wait()
    assert new
    assert not old
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_policy_update_changes_the_strategy() -> None:
    """A spec change to the strategy takes effect on the next checkout."""
    clock = iter(range(100, 200))
    broker = Broker("p", PoolPolicy(min_size=2, max_size=2), clock=lambda: float(next(clock)))
    broker.update_agents([agent("a"), agent("b")])
    first = await broker.checkout(timeout=1, holder="h")
    second = await broker.checkout(timeout=1, holder="h")
    broker.checkin(first)
    broker.checkin(second)
    broker.update_policy(PoolPolicy(min_size=2, max_size=2, strategy="FIFO"))
    assert (await broker.checkout(timeout=1, holder="h")).agent == first.agent


async def test_registry_keys_by_namespace_and_pool() -> None:
    """Brokers are one per (namespace, pool); closing one fails its waiters only."""
    brokers = Brokers(clock=lambda: 0.0)
    policy = PoolPolicy(min_size=0, max_size=1)
    one = brokers.ensure("ns1", "p", policy)
    assert brokers.ensure("ns1", "p", policy) is one
    two = brokers.ensure("ns2", "p", policy)
    assert two is not one
    assert ("ns1", "p") in brokers
    assert len(brokers) == 2
    assert brokers.get("ns1", "missing") is None

    bigger = PoolPolicy(min_size=0, max_size=3)
    assert brokers.ensure("ns1", "p", bigger).policy == bigger

    waiting = asyncio.create_task(one.checkout(timeout=5, holder="h"))
    async with asyncio.timeout(5):
        await one.changed.wait()
    brokers.close("ns1", "p")
    with pytest.raises(PoolClosed):
        await waiting
    assert brokers.get("ns1", "p") is None
    assert not two.closed
    brokers.close_all()
    assert two.closed
    assert len(brokers) == 0


async def test_an_unused_checkout_keeps_the_failure_streak_and_uses() -> None:
    """A holder that gives an agent back unused (a retry moved to another agent) neither counts
    a use nor clears the failure streak, so a broken agent still reaches quarantine."""
    broker = Broker("p", PoolPolicy(min_size=2, max_size=2, quarantine_after_failures=2))
    broker.update_agents([agent("a", idle_since=2.0), agent("b", idle_since=1.0)])
    healthy = await broker.checkout(timeout=1, holder="h")
    first = await broker.checkout(timeout=1, holder="h")
    assert (healthy.agent, first.agent) == ("a", "b")
    broker.checkin(first, CheckinOutcome.FAILURE)
    swapped = await broker.checkout(timeout=1, holder="h")
    assert swapped.agent == "b"
    assert broker.checkin(swapped, CheckinOutcome.UNUSED)
    seen = {a.name: a for a in broker.agents()}["b"]
    assert seen.consecutive_failures == 1
    assert seen.uses == 1
    again = await broker.checkout(timeout=1, holder="h")
    assert again.agent == "b"
    broker.checkin(healthy, CheckinOutcome.SUCCESS)
    broker.checkin(again, CheckinOutcome.FAILURE)
    seen = {a.name: a for a in broker.agents()}["b"]
    assert seen.consecutive_failures == 2
    assert plan(broker.policy, broker.agents(), broker.waiters(), 0.0).retired_names == ("b",)


def test_the_planners_view_keeps_every_pod_fact() -> None:
    """What the planner sees of an agent is the pod as observed, every field of it, with only
    the broker's own bookkeeping laid over it: a field added to the pod cannot be lost."""
    pod = ObservedAgent(
        **{
            field.name: {
                "name": "a",
                "waiting_reason": "ImagePullBackOff",
                "template_hash": "t",
                "token_hash": "k",
                "ip": "10.0.0.7",
            }.get(field.name, _unusual(field.type))
            for field in dataclasses.fields(ObservedAgent)
        }
    )
    record = AgentRecord(pod=pod)
    view = record.view(slots=pod.slots)
    kept_by_the_broker = {
        "busy",
        "busy_slots",
        "slots",
        "uses",
        "idle_since",
        "idle_seq",
        "consecutive_failures",
    }
    for field in dataclasses.fields(ObservedAgent):
        if field.name not in kept_by_the_broker:
            assert getattr(view, field.name) == getattr(pod, field.name), field.name


def _unusual(annotation: object) -> object:
    """A value no default has, for a field of this annotation."""
    text = str(annotation)
    if text.startswith("bool"):
        return True
    if text.startswith("int"):
        return 7
    if "float" in text:
        return 12.5
    return "x"
