"""One attempt at one item: what the agent answered becomes a verdict, the agent goes back as
it should, and a retry goes to another agent when one is free.

Table tests of :func:`judge`, and tests of :class:`AgentCalls` against the fake broker and agents.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from runfakes import (
    Dispatching,
    FakeDispatcher,
    FakeInvoker,
    Result,
    echo,
    run_config,
)

from agentpool.broker import Broker
from agentpool.pool import ObservedAgent, PoolPolicy
from agentpool.pool.checkin import CheckinOutcome
from agentpool.runs.backlog import Work
from agentpool.runs.calls import OUTPUT_MAX, AgentCalls, Verdict, judge
from agentpool.runs.contracts import CheckoutTerms, HeldAgent
from clocks import LoopClock

#: Calls, back-offs and status intervals pass on looptime's fake loop time.
pytestmark = pytest.mark.looptime

BIG = "x" * OUTPUT_MAX


@pytest.mark.parametrize(
    ("result", "verdict"),
    [
        (
            Result(ok=True, output={"n": 1}),
            Verdict(checkin="success", ok=True, output={"n": 1}, encoded='{"n":1}'),
        ),
        (
            Result(ok=False, reason="AgentError", message="no"),
            Verdict(checkin="failure", reason="AgentError", message="no"),
        ),
        (
            Result(ok=False, reason="", message="broken", lost=True),
            Verdict(checkin="lost", reason="CallFailed", message="broken"),
        ),
        (
            Result(ok=False, reason="Unauthorized", message="token"),
            Verdict(checkin="lost", refused=True),
        ),
        (
            Result(ok=True, output=BIG),
            Verdict(
                checkin="success",
                reason="OutputTooLarge",
                message=f"output of {OUTPUT_MAX + 2} bytes exceeds {OUTPUT_MAX}",
            ),
        ),
    ],
    ids=["output", "failure", "lost", "refused", "too-large"],
)
def test_an_answer_becomes_a_verdict(result: Result, verdict: Verdict) -> None:
    """An output is encoded once; a failure keeps its reason (CallFailed when it has none); a
    refused token is no failure; an output too large for a ConfigMap fails, yet the agent that
    gave it is sound."""
    assert judge(result) == verdict


def caller(clock: LoopClock, dispatcher: FakeDispatcher, invoker: Any, **config: Any) -> AgentCalls:
    return AgentCalls(
        run_config("run", pool="workers", input={"k": 1}, **config),
        dispatcher=Dispatching(dispatcher, invoker),
    )


async def test_the_agent_is_handed_the_envelope_of_the_agent_protocol() -> None:
    """The agent gets the item's id, the item, the run's input, the attempt and the run."""
    clock = LoopClock()
    dispatcher = FakeDispatcher(clock, {"workers": 1})
    invoker = FakeInvoker(clock, echo())
    calls = caller(clock, dispatcher, invoker)
    work = Work(key="a", index=0, value={"n": 1}, pool="workers", attempt=2)
    checkout = await calls.checkout(work)
    verdict = await calls.call(work, checkout)
    assert invoker.envelopes == [
        {"id": "a", "item": {"n": 1}, "input": {"k": 1}, "attempt": 2, "run": "run"}
    ]
    assert verdict.ok
    assert verdict.output == {"echo": {"n": 1}}
    assert dispatcher.checkins == [("workers-0", "success")]


async def test_a_retry_goes_to_another_agent_when_one_is_free() -> None:
    """The agent that failed the last attempt goes back untouched when another is free; with
    none free the retry goes to it again."""
    clock = LoopClock()
    dispatcher = FakeDispatcher(clock, {"workers": 2})
    calls = caller(clock, dispatcher, FakeInvoker(clock, echo()))
    # The fake hands out its idle agents last first: workers-1, then workers-0.
    work = Work(key="a", index=0, value={}, pool="workers", attempt=2, last_agent="workers-1")
    checkout = await calls.checkout(work)
    assert checkout.agent == "workers-0"
    assert dispatcher.checkins == [("workers-1", "unused")]
    again = await calls.checkout(Work("b", 1, {}, "workers", last_agent="workers-1"))
    assert again.agent == "workers-1", "no other agent free: the same one"


async def test_an_agent_client_error_costs_an_attempt_and_the_agent() -> None:
    """The client's own bug is the item's failure (CallFailed), and the agent is retired."""

    class Broken:
        async def invoke(self, *args: Any, **kwargs: Any) -> Result:
            raise RuntimeError("bug")

    clock = LoopClock()
    dispatcher = FakeDispatcher(clock, {"workers": 1})
    calls = caller(clock, dispatcher, Broken())
    work = Work(key="a", index=0, value={}, pool="workers")
    verdict = await calls.call(work, await calls.checkout(work))
    assert (verdict.ok, verdict.reason, verdict.message) == (
        False,
        "CallFailed",
        "RuntimeError('bug')",
    )
    assert dispatcher.checkins == [("workers-0", "lost")]


async def test_a_call_stopped_midway_gives_its_agent_back_lost() -> None:
    """An operator stopping mid-call does not keep the agent checked out: its state is unknown."""
    clock = LoopClock()
    dispatcher = FakeDispatcher(clock, {"workers": 1})
    calls = caller(clock, dispatcher, FakeInvoker(clock, echo(duration=60.0)))
    work = Work(key="a", index=0, value={}, pool="workers")
    checkout = await calls.checkout(work)
    task = asyncio.ensure_future(calls.call(work, checkout))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert dispatcher.checkins == [("workers-0", "lost")]


class BrokerDispatcher:
    """A real broker as the run sees it, with no Kubernetes in between."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.checkins: list[tuple[str, str]] = []

    async def checkout(self, terms: CheckoutTerms, *, waiting: Any = None) -> HeldAgent:
        return await self.broker.checkout(
            timeout=terms.timeout, priority=terms.priority, holder=terms.holder
        )

    async def checkin(self, checkout: HeldAgent, outcome: CheckinOutcome) -> None:
        self.checkins.append((checkout.agent, outcome))
        self.broker.checkin(checkout, outcome)


def slotted_broker(clock: LoopClock, names: list[str], strategy: str = "LIFO") -> Broker:
    broker = Broker(
        "workers",
        PoolPolicy(min_size=len(names), max_size=len(names), slots=4, strategy=strategy),  # type: ignore[arg-type]
        clock=clock.now,
    )
    broker.update_agents([ObservedAgent(name, ready=True, ready_at=0.0, slots=4) for name in names])
    return broker


@pytest.mark.parametrize("strategy", ["LIFO", "FIFO"])
async def test_a_retry_goes_to_another_agent_with_several_slots(strategy: str) -> None:
    """Two agents of four slots: a retry of an item that failed on one goes to the other, though
    the strategy would hand the failing agent out again for its free slots; the first agent is
    given back unused, so its failure streak stands."""
    clock = LoopClock()
    broker = slotted_broker(clock, ["w-0", "w-1"], strategy)
    dispatcher = BrokerDispatcher(broker)
    calls = caller(clock, dispatcher, FakeInvoker(clock, echo()))  # type: ignore[arg-type]
    first = await calls.checkout(Work(key="a", index=0, value={}, pool="workers"))
    await dispatcher.checkin(first, CheckinOutcome.FAILURE)
    work = Work(key="a", index=0, value={}, pool="workers", attempt=2, last_agent=first.agent)
    retry = await calls.checkout(work)
    assert retry.agent != first.agent
    assert broker.counts()["busy_slots"] == 1
    (failed,) = [agent for agent in broker.agents() if agent.name == first.agent]
    assert failed.consecutive_failures == 1


async def test_a_retry_on_the_only_agent_takes_one_slot_of_it() -> None:
    """With no other agent, the retry goes to the same one, holding one slot: the slots tried on
    the way are given back."""
    clock = LoopClock()
    broker = slotted_broker(clock, ["w-0"])
    dispatcher = BrokerDispatcher(broker)
    calls = caller(clock, dispatcher, FakeInvoker(clock, echo()))  # type: ignore[arg-type]
    work = Work(key="a", index=0, value={}, pool="workers", attempt=2, last_agent="w-0")
    retry = await calls.checkout(work)
    assert retry.agent == "w-0"
    assert broker.counts()["busy_slots"] == 1
    (agent,) = broker.agents()
    assert agent.uses == 1
