"""The broker hands out each agent to one holder at a time, by strategy, to waiters in order."""

from __future__ import annotations

import asyncio
import dataclasses
import random

import pytest

from agentpool.broker import Broker, Checkout
from agentpool.pool import ObservedAgent, PoolPolicy
from agentpool.pool.checkin import CheckinOutcome, CheckoutTimedOut, PoolClosed, TooManyWaiters
from brokerwait import queued, wait_until


class FakeClock:
    """A clock the test moves by hand, so idle order does not depend on timing."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float = 1.0) -> None:
        self.now += seconds


def agent(name: str, *, ready: bool = True, **fields: object) -> ObservedAgent:
    """A pod of the pool as the reconciler would report it."""
    return ObservedAgent(
        name=name,
        created_at=900.0,
        ready=ready,
        ready_at=950.0 if ready else None,
        ip=f"10.0.0.{abs(hash(name)) % 200 + 1}",
        **fields,  # type: ignore[arg-type]
    )


def make_broker(
    names: list[str],
    *,
    clock: FakeClock | None = None,
    **policy: object,
) -> Broker:
    fields: dict[str, object] = {"min_size": len(names), "max_size": len(names) + 2}
    fields.update(policy)
    broker = Broker("p", PoolPolicy(**fields), clock=clock or FakeClock())  # type: ignore[arg-type]
    broker.update_agents([agent(name) for name in names])
    return broker


async def test_checkout_gives_an_idle_agent_with_its_endpoint() -> None:
    """A checkout on a pool with an idle agent returns it at once, with address and holder."""
    broker = make_broker(["a"], port=9000)
    handle = await broker.checkout(timeout=1, holder="run/x")
    assert (handle.agent, handle.holder, handle.port, handle.pool) == ("a", "run/x", 9000, "p")
    assert handle.endpoint == f"http://{handle.ip}:9000"
    assert [view.busy for view in broker.agents()] == [True]


@pytest.mark.parametrize(("strategy", "expected"), [("LIFO", "c"), ("FIFO", "a")])
async def test_strategy_decides_which_returned_agent_goes_next(
    strategy: str, expected: str
) -> None:
    """After a, b, c are returned in that order, LIFO hands out c and FIFO hands out a."""
    clock = FakeClock()
    broker = make_broker(["a", "b", "c"], clock=clock, strategy=strategy)
    handles = {}
    for _ in range(3):
        handle = await broker.checkout(timeout=1, holder="h")
        handles[handle.agent] = handle
    for name in ["a", "b", "c"]:
        clock.tick()
        assert broker.checkin(handles[name], CheckinOutcome.SUCCESS)
    assert (await broker.checkout(timeout=1, holder="h")).agent == expected


@pytest.mark.parametrize("strategy", ["LIFO", "FIFO"])
async def test_strategy_exact_without_clock_ticks(strategy: str) -> None:
    """With a clock that never moves, the return order alone decides, exactly."""
    broker = make_broker(["a", "b", "c"], strategy=strategy)
    handles = [await broker.checkout(timeout=1, holder="h") for _ in range(3)]
    returned = [handles[1], handles[2], handles[0]]
    for handle in returned:
        broker.checkin(handle)
    order = [(await broker.checkout(timeout=1, holder="h")).agent for _ in range(3)]
    names = [handle.agent for handle in returned]
    assert order == (names[::-1] if strategy == "LIFO" else names)


async def test_waiters_served_by_priority_then_arrival_across_holders() -> None:
    """With the only agent busy, waiters from several runs get it by priority, then arrival."""
    broker = make_broker(["a"])
    first = await broker.checkout(timeout=1, holder="owner")
    arrivals = [("run-1", 0), ("run-2", 5), ("lease-1", 0), ("run-3", 5), ("lease-2", 9)]
    tasks = {}
    for holder, priority in arrivals:
        tasks[holder] = asyncio.create_task(
            broker.checkout(timeout=5, priority=priority, holder=holder)
        )
        await wait_until(broker, queued(broker, len(tasks)))
    assert [w.holder for w in broker.waiters()] == ["lease-2", "run-2", "run-3", "run-1", "lease-1"]

    served = []
    current = first
    pending = set(tasks.values())
    for _ in arrivals:
        broker.checkin(current)
        done, pending = await asyncio.wait(pending, timeout=5, return_when="FIRST_COMPLETED")
        assert len(done) == 1
        current = done.pop().result()
        served.append(current)
    assert [handle.holder for handle in served] == [
        "lease-2",
        "run-2",
        "run-3",
        "run-1",
        "lease-1",
    ]


async def test_a_checkout_that_began_waiting_earlier_goes_ahead_within_its_priority() -> None:
    """A run created first whose checkout reaches the pool after another run's is served first:
    the broker orders by when each began waiting, and priority still comes before that."""
    clock = FakeClock()
    broker = make_broker(["a"], clock=clock)
    current = await broker.checkout(timeout=1, holder="owner")
    tasks = []
    for holder, priority, since in [("later", 0, None), ("earlier", 0, 990.0), ("high", 1, None)]:
        clock.tick()
        tasks.append(
            asyncio.create_task(
                broker.checkout(timeout=5, priority=priority, holder=holder, since=since)
            )
        )
        await wait_until(broker, queued(broker, len(tasks)))
    assert [w.holder for w in broker.waiters()] == ["high", "earlier", "later"]
    assert [w.since for w in broker.waiters()] == [1003.0, 990.0, 1001.0]

    served = []
    pending = set(tasks)
    for _ in tasks:
        broker.checkin(current)
        done, pending = await asyncio.wait(pending, timeout=5, return_when="FIRST_COMPLETED")
        current = done.pop().result()
        served.append(current.holder)
    assert served == ["high", "earlier", "later"]


async def test_timeout_raises_pool_exhausted_with_the_facts() -> None:
    """A checkout that waits past its timeout fails naming the pool, its size, ready, waiters."""
    broker = make_broker(["a", "b"], min_size=1, max_size=2)
    await broker.checkout(timeout=1, holder="h1")
    await broker.checkout(timeout=1, holder="h2")
    other = asyncio.create_task(broker.checkout(timeout=5, holder="h3"))
    await wait_until(broker, lambda: len(broker.waiters()) == 1)
    with pytest.raises(CheckoutTimedOut) as caught:
        await broker.checkout(timeout=0.05, holder="h4")
    assert str(caught.value) == (
        'pool "p" exhausted after 0.05s: 2 of 2 agents busy '
        "(minSize 1, maxSize 2, ready 2), 2 waiting"
    )
    assert [w.holder for w in broker.waiters()] == ["h3"]
    other.cancel()
    with pytest.raises(asyncio.CancelledError):
        await other
    assert broker.waiters() == ()


async def test_zero_timeout_fails_at_once_when_nothing_is_idle() -> None:
    """A non-blocking checkout (timeout 0) fails at once instead of queueing."""
    broker = make_broker([])
    with pytest.raises(CheckoutTimedOut, match=r"0 of 0 agents busy"):
        await broker.checkout(timeout=0, holder="h")
    assert broker.waiters() == ()


async def test_agent_never_handed_out_twice() -> None:
    """Under many concurrent checkouts and checkins, no agent ever has two holders at once."""
    names = [f"a{i}" for i in range(4)]
    broker = make_broker(names, strategy="LIFO", quarantine_after_failures=0)
    holding: set[str] = set()
    rng = random.Random(7)
    handed = 0

    async def worker(index: int) -> None:
        nonlocal handed
        for _ in range(25):
            priority = rng.randint(0, 2)
            handle = await broker.checkout(timeout=5, priority=priority, holder=f"w{index}")
            assert handle.agent not in holding
            holding.add(handle.agent)
            handed += 1
            for _ in range(rng.randint(0, 3)):
                await asyncio.sleep(0)  # yield to other workers, not to wait for anything
            holding.discard(handle.agent)
            broker.checkin(handle, rng.choice([CheckinOutcome.SUCCESS, CheckinOutcome.FAILURE]))

    await asyncio.gather(*(worker(i) for i in range(12)))
    assert handed == 12 * 25
    assert all(not view.busy for view in broker.agents())


async def test_checkin_returns_agent_and_stale_handles_do_nothing() -> None:
    """A checked-in agent is available again; a second checkin of the same handle is ignored."""
    broker = make_broker(["a"])
    handle = await broker.checkout(timeout=1, holder="h")
    assert broker.checkin(handle, "success")
    again = await broker.checkout(timeout=1, holder="h2")
    assert again.agent == "a"
    assert not broker.checkin(handle, "success")  # stale: must not free the new holder's agent
    assert broker.agents()[0].busy
    assert again.serial != handle.serial


async def test_new_ready_agent_serves_waiter_at_once() -> None:
    """A waiter is served the moment a pending pod turns Ready."""
    broker = make_broker([])
    broker.update_agents([agent("n", ready=False)])
    task = asyncio.create_task(broker.checkout(timeout=5, holder="h"))
    await wait_until(broker, lambda: len(broker.waiters()) == 1)
    broker.update_agents([agent("n", ready=True)])
    # Handed over within update_agents itself, before the waiter even runs again.
    assert broker.waiters() == ()
    assert [view.busy for view in broker.agents()] == [True]
    async with asyncio.timeout(5):
        assert (await task).agent == "n"


async def test_idle_agent_that_turns_unready_leaves_the_idle_set() -> None:
    """An idle agent whose pod turns unready is not handed out."""
    broker = make_broker(["a", "b"], strategy="LIFO")
    broker.update_agents([agent("a"), replace_ready(agent("b"), False)])
    assert [(await broker.checkout(timeout=1, holder="h")).agent] == ["a"]
    with pytest.raises(CheckoutTimedOut):
        await broker.checkout(timeout=0, holder="h")


def replace_ready(observed: ObservedAgent, ready: bool) -> ObservedAgent:
    return dataclasses.replace(observed, ready=ready)


async def test_an_agent_failing_where_others_succeed_is_quarantined() -> None:
    """An agent that fails quarantineAfterFailures items in a row while the others serve items
    is no longer handed out."""
    broker = make_broker(["a", "b"], strategy="FIFO", quarantine_after_failures=2)
    for _ in range(2):
        for name, outcome in (("a", CheckinOutcome.FAILURE), ("b", CheckinOutcome.SUCCESS)):
            handle = await broker.checkout(timeout=1, holder="h")
            assert handle.agent == name
            broker.checkin(handle, outcome)
    assert broker.changed.is_set()
    assert [(a.name, a.quarantined) for a in broker.agents()] == [("a", True), ("b", False)]
    assert (await broker.checkout(timeout=0, holder="h")).agent == "b"
    with pytest.raises(CheckoutTimedOut):
        await broker.checkout(timeout=0, holder="h")


async def test_items_failing_on_every_agent_quarantine_none() -> None:
    """When every agent fails every item, the items are at fault: no agent is quarantined, so
    the pool does not churn pods over bad input."""
    broker = make_broker(["a", "b"], strategy="FIFO", quarantine_after_failures=2)
    for _ in range(20):
        broker.checkin(await broker.checkout(timeout=1, holder="h"), CheckinOutcome.FAILURE)
    assert [a.quarantined for a in broker.agents()] == [False, False]
    assert [a.consecutive_failures for a in broker.agents()] == [10, 10]


async def test_success_clears_the_failure_streak() -> None:
    """Failures must be in a row: a success in between resets the count."""
    broker = make_broker(["a"], quarantine_after_failures=2)
    for outcome in (CheckinOutcome.FAILURE, CheckinOutcome.SUCCESS, CheckinOutcome.FAILURE):
        broker.checkin(await broker.checkout(timeout=1, holder="h"), outcome)
    assert (await broker.checkout(timeout=1, holder="h")).agent == "a"


@pytest.mark.parametrize(
    ("outcome", "flag"),
    [(CheckinOutcome.LOST, "lost"), (CheckinOutcome.RESET_FAILED, "reset_failed")],
)
async def test_lost_or_reset_failed_agent_is_not_reused(outcome: CheckinOutcome, flag: str) -> None:
    """An agent whose call timed out or whose reset failed is kept out, for the planner."""
    broker = make_broker(["a"])
    broker.checkin(await broker.checkout(timeout=1, holder="h"), outcome)
    assert getattr(broker.agents()[0], flag)
    with pytest.raises(CheckoutTimedOut):
        await broker.checkout(timeout=0, holder="h")


async def test_max_uses_keeps_worn_agent_out() -> None:
    """After maxUses checkouts an agent is not handed out again."""
    broker = make_broker(["a"], max_uses=2)
    for _ in range(2):
        broker.checkin(await broker.checkout(timeout=1, holder="h"))
    assert broker.agents()[0].uses == 2
    with pytest.raises(CheckoutTimedOut):
        await broker.checkout(timeout=0, holder="h")


async def test_cancelled_checkout_gives_back_the_agent_it_was_handed() -> None:
    """A caller cancelled just after being handed an agent does not leak it."""
    broker = make_broker(["a"])
    first = await broker.checkout(timeout=1, holder="h1")
    task = asyncio.create_task(broker.checkout(timeout=5, holder="h2"))
    await wait_until(broker, lambda: len(broker.waiters()) == 1)
    broker.checkin(first)  # hands "a" to the waiter ...
    task.cancel()  # ... which is cancelled before it runs again
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not broker.agents()[0].busy
    assert broker.agents()[0].uses == 1
    assert (await broker.checkout(timeout=1, holder="h3")).agent == "a"


async def test_close_fails_waiters_and_later_checkouts() -> None:
    """Deleting the pool fails every waiter and every later checkout with a clear error."""
    broker = make_broker(["a"])
    await broker.checkout(timeout=1, holder="h")
    waiting = [asyncio.create_task(broker.checkout(timeout=5, holder=f"w{i}")) for i in range(3)]
    await wait_until(broker, lambda: len(broker.waiters()) == 3)
    broker.close()
    for task in waiting:
        with pytest.raises(PoolClosed, match='pool "p" was deleted'):
            await task
    with pytest.raises(PoolClosed):
        await broker.checkout(timeout=1, holder="late")


async def test_restore_busy_keeps_agent_out_until_checked_in() -> None:
    """After an operator restart, an agent that reports busy is not handed out until it is back."""
    broker = make_broker(["a", "b"], strategy="LIFO")
    restored = broker.restore_busy("b", "item-7")
    assert isinstance(restored, Checkout)
    assert restored.holder == "restored:item-7"
    assert broker.restore_busy("b", "item-7") is None
    assert broker.restore_busy("nobody", None) is None
    assert (await broker.checkout(timeout=1, holder="h")).agent == "a"
    broker.checkin(restored)
    assert (await broker.checkout(timeout=1, holder="h")).agent == "b"


async def test_restored_uses_keep_max_uses_across_an_operator_restart() -> None:
    """An agent that served 3 items before the restart, in a pool with maxUses 4, serves one
    more and is then worn out; a lower count never undoes what the broker counted itself."""
    broker = make_broker(["a"], max_uses=4)
    broker.restore_uses("a", 3)
    broker.restore_uses("a", 1)
    broker.restore_uses("nobody", 9)
    handle = await broker.checkout(timeout=1, holder="h")
    broker.checkin(handle, CheckinOutcome.SUCCESS)
    assert [view.uses for view in broker.agents()] == [4]
    with pytest.raises(CheckoutTimedOut):
        await broker.checkout(timeout=0, holder="h")


async def test_a_checkout_says_whether_it_waited_for_its_agent() -> None:
    """An agent found idle is a warm checkout; one handed over after a wait (a checkin, a new
    agent) is not, however fast the wait was: the metrics label them so."""
    broker = make_broker(["a"])
    first = await broker.checkout(timeout=1, holder="first")
    assert not first.waited
    second = asyncio.ensure_future(broker.checkout(timeout=5, holder="second"))
    await wait_until(broker, lambda: len(broker.waiters()) == 1)
    broker.checkin(first, CheckinOutcome.SUCCESS)
    assert (await second).waited


async def test_a_checkout_past_the_waiting_bound_is_refused_at_once() -> None:
    """With ``max_waiters`` checkouts in line, one more that would wait is refused at once with
    TooManyWaiters naming the bound; one that finds an agent free, or would not wait, is not
    held to it, and a place freed in line is taken again."""
    broker = make_broker(["a"])
    held = await broker.checkout(timeout=1, holder="first", max_waiters=1)
    waiting = asyncio.create_task(broker.checkout(timeout=5, holder="second", max_waiters=1))
    await wait_until(broker, queued(broker, 1))
    with pytest.raises(TooManyWaiters, match=r"maxWaiters 1"):
        await broker.checkout(timeout=5, holder="third", max_waiters=1)
    with pytest.raises(CheckoutTimedOut):
        await broker.checkout(timeout=0, holder="at-once", max_waiters=1)
    assert len(broker.waiters()) == 1
    broker.checkin(held)
    second = await waiting
    third = asyncio.create_task(broker.checkout(timeout=5, holder="third", max_waiters=1))
    await wait_until(broker, queued(broker, 1))
    broker.checkin(second)
    assert (await third).holder == "third"


async def test_a_waiter_cancelled_leaves_the_line_at_once() -> None:
    """A waiting checkout that is cancelled (its caller went away) is out of the line at once:
    it is not counted as waiting and the next waiter gets the agent."""
    broker = make_broker(["a"])
    held = await broker.checkout(timeout=1, holder="holder")
    gone = asyncio.create_task(broker.checkout(timeout=5, holder="gone"))
    await wait_until(broker, queued(broker, 1))
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert broker.waiters() == ()
    assert broker.counts()["waiting"] == 0
    after = asyncio.create_task(broker.checkout(timeout=5, holder="after"))
    await wait_until(broker, queued(broker, 1))
    broker.checkin(held)
    assert (await after).holder == "after"


async def test_a_quiet_pools_first_checkout_wakes_its_loop_once() -> None:
    """A pool whose loop went quiet is told of its first checkout (its demand is sampled on
    passes), and of none after it: a stream of calls costs no pass each."""
    woken: list[str] = []
    broker = make_broker(["a", "b"])
    broker.on_change = lambda: woken.append("pass")
    first = await broker.checkout(timeout=1, holder="x")
    assert woken == []  # not quiet: the loop's passes come anyway
    broker.checkin(first)
    broker.wake_on_checkout = True
    broker.checkin(await broker.checkout(timeout=1, holder="y"))
    broker.checkin(await broker.checkout(timeout=1, holder="z"))
    assert woken == ["pass"]
    assert broker.wake_on_checkout is False
