"""The PoolRun engine driven with a fake broker, agents and status on a virtual clock."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import looptime
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runfakes import (
    Behaviour,
    Dispatching,
    FakeDispatcher,
    FakeInvoker,
    FakeSink,
    Result,
    echo,
    run_config,
)

from agentpool.api import Routes
from agentpool.runs.engine import RunEngine
from agentpool.runs.sources import inline_source
from agentpool.wire.envelopes import EnvelopeBody
from agentpool.wire.results import iter_results
from clocks import LoopClock

#: Calls, back-offs and status intervals pass on looptime's fake loop time.
pytestmark = pytest.mark.looptime


def build(
    items: list[Any],
    *,
    behaviour: Behaviour | None = None,
    pools: dict[str, int] | None = None,
    **settings: Any,
) -> tuple[RunEngine, LoopClock, FakeDispatcher, FakeInvoker, FakeSink]:
    clock = LoopClock()
    settings.setdefault("pool", "workers")
    config = run_config("run", **settings)
    dispatcher = FakeDispatcher(clock, pools if pools is not None else {"workers": 8})
    invoker = FakeInvoker(clock, behaviour or echo())
    sink = FakeSink()
    engine = RunEngine(
        config,
        source=inline_source(items),
        dispatcher=Dispatching(dispatcher, invoker),
        sink=sink,
        clock=clock,
    )
    return engine, clock, dispatcher, invoker, sink


def fail_marked(duration: float = 0.1) -> Behaviour:
    """Items with ``"fail": true`` fail with the agent's reason; the others echo."""

    def behave(envelope: EnvelopeBody, agent: str) -> tuple[float, Result]:
        if envelope["item"].get("fail"):
            return duration, Result(ok=False, reason="HandlerError", message="asked to fail")
        return duration, Result(ok=True, output={"echo": envelope["item"]})

    return behave


async def test_200_items_cap_8_drain_with_every_output_by_id() -> None:
    """200 items through a pool of 8 with cap 8 end Drained with each item's own output."""
    items = [{"id": f"item-{n}", "n": n} for n in range(200)]
    engine, _, dispatcher, invoker, sink = build(items, cap=8, item_id="id")
    outcome = await engine.run()
    assert (outcome.phase, outcome.result) == ("Succeeded", "Drained")
    status = sink.status
    assert status["phase"] == "Succeeded"
    assert status["result"] == "Drained"
    assert (status["succeeded"], status["failed"], status["total"]) == (200, 0, 200)
    assert status["active"] == 0
    assert status["items"] == {item["id"]: {"echo": item} for item in items}
    assert invoker.most_active <= 8
    assert dispatcher.most_held <= 8
    assert sorted(invoker.runs.values()) == [1] * 200
    complete = next(c for c in status["conditions"] if c["type"] == "Complete")
    assert complete["status"] == "True"
    assert status["startTime"] <= status["completionTime"]
    assert sink.reasons()[0] == "Started"
    assert sink.reasons()[-1] == "Drained"


async def test_five_of_fifty_failing_fail_the_run_under_fail() -> None:
    """Under the Fail policy, 5 failed items of 50 fail the run with "5 of 50 items failed"."""
    items = [{"id": f"i{n}", "fail": n % 10 == 3} for n in range(50)]
    engine, _, _, _, sink = build(items, cap=4, item_id="id", behaviour=fail_marked())
    outcome = await engine.run()
    assert outcome.phase == "Failed"
    assert sink.status["phase"] == "Failed"
    assert sink.status["result"] == "Drained"
    assert sink.status["message"] == "5 of 50 items failed"
    assert sink.status["succeeded"] == 45
    failed = next(c for c in sink.status["conditions"] if c["type"] == "Failed")
    assert failed["status"] == "True"
    assert failed["message"] == "5 of 50 items failed"


async def test_five_of_fifty_failing_are_reported_under_report() -> None:
    """Under Report, the run succeeds Drained and each failure has reason, message, attempts,
    agent."""
    items = [{"id": f"i{n}", "fail": n % 10 == 3} for n in range(50)]
    engine, _, _, _, sink = build(
        items, cap=4, item_id="id", failures="Report", behaviour=fail_marked()
    )
    outcome = await engine.run()
    assert (outcome.phase, outcome.result) == ("Succeeded", "Drained")
    assert sink.status["phase"] == "Succeeded"
    failures = sink.status["failures"]
    assert sorted(failures) == sorted(f"i{n}" for n in range(50) if n % 10 == 3)
    for failure in failures.values():
        assert failure["reason"] == "HandlerError"
        assert failure["message"] == "asked to fail"
        assert failure["attempts"] == 1
        assert failure["agent"].startswith("workers-")
    assert len(sink.status["items"]) == 45


async def test_an_item_failing_once_succeeds_on_its_second_attempt() -> None:
    """With maxAttempts 2 an item that fails once succeeds, seen by the agent as attempt 2."""

    def flaky_once(envelope: EnvelopeBody, agent: str) -> tuple[float, Result]:
        if envelope["id"] == "b" and envelope["attempt"] == 1:
            return 0.1, Result(ok=False, reason="HandlerError", message="first time fails")
        return 0.1, Result(ok=True, output=envelope["attempt"])

    items = [{"id": "a"}, {"id": "b"}, {"id": "c"}]
    engine, _, _, invoker, sink = build(
        items, item_id="id", max_attempts=2, backoff_seconds=1.0, behaviour=flaky_once
    )
    outcome = await engine.run()
    assert outcome.phase == "Succeeded"
    assert sink.status["items"]["b"] == 2
    assert sink.status["retries"] == 1
    attempts = [(attempt, agent) for key, attempt, agent in invoker.calls if key == "b"]
    assert [attempt for attempt, _ in attempts] == [1, 2]
    # The retry goes to another agent, since others are free.
    assert attempts[0][1] != attempts[1][1]


async def test_an_item_failing_every_attempt_records_its_attempts() -> None:
    """An item that fails all of maxAttempts 3 is recorded with 3 attempts and 2 retries."""
    engine, clock, _, invoker, sink = build(
        [{"fail": True}], max_attempts=3, backoff_seconds=2.0, behaviour=fail_marked()
    )
    start = clock.now()
    await engine.run()
    assert sink.status["failures"]["0"]["attempts"] == 3
    assert sink.status["retries"] == 2
    assert [attempt for _, attempt, _ in invoker.calls] == [1, 2, 3]
    # Back-off 2 s then 4 s, plus three calls of 0.1 s.
    assert clock.now() - start >= 6.29


async def test_missing_pool_deadlocks_naming_the_pool() -> None:
    """A run whose pool does not exist ends Deadlocked, its message naming the missing pool."""
    engine, _, _, invoker, sink = build([1, 2, 3], pools={})
    outcome = await engine.run()
    assert outcome.result == "Deadlocked"
    assert sink.status["result"] == "Deadlocked"
    assert sink.status["phase"] == "Failed"
    assert 'pool "workers" not found' in sink.status["message"]
    assert "3 of 3 items could not start" in sink.status["message"]
    assert invoker.calls == []
    assert sink.reasons()[-1] == "Deadlocked"
    assert sink.status.get("inFlight", {}) == {}


async def test_checkout_timeout_with_nothing_in_flight_deadlocks() -> None:
    """A pool whose agents never become Ready deadlocks the run after the checkout timeout."""
    engine, clock, _, invoker, sink = build(
        list(range(5)), cap=2, pools={"workers": 0}, checkout_timeout_seconds=30
    )
    start = clock.now()
    outcome = await engine.run()
    assert outcome.result == "Deadlocked"
    assert 'pool "workers" exhausted after 30s' in sink.status["message"]
    assert clock.now() - start >= 30
    assert invoker.calls == []
    assert sink.status["succeeded"] == 0


async def test_checkout_timeout_while_items_run_waits_for_them() -> None:
    """A checkout that times out while other items hold agents waits again, not deadlocks."""
    engine, _, _, _, sink = build(
        list(range(6)),
        cap=4,
        pools={"workers": 1},
        checkout_timeout_seconds=1,
        behaviour=echo(duration=3.0),
    )
    outcome = await engine.run()
    assert (outcome.phase, outcome.result) == ("Succeeded", "Drained")
    assert sink.status["succeeded"] == 6


async def test_routes_send_items_to_their_pools_and_unrouted_items_fail() -> None:
    """Routes pick each item's pool by a field; an item whose value has no route fails NoRoute."""
    items = [
        {"id": "r1", "role": "researcher"},
        {"id": "c1", "role": "coder"},
        {"id": "x1", "role": "painter"},
        {"id": "r2", "role": "researcher"},
    ]
    routes = Routes(field="role", pools={"researcher": "research", "coder": "code"})
    engine, _, _, invoker, sink = build(
        items,
        pool=None,
        routes=routes,
        item_id="id",
        cap=4,
        failures="Report",
        pools={"research": 2, "code": 2},
    )
    await engine.run()
    agents = {key: agent for key, _, agent in invoker.calls}
    assert agents["r1"].startswith("research-")
    assert agents["r2"].startswith("research-")
    assert agents["c1"].startswith("code-")
    failure = sink.status["failures"]["x1"]
    assert failure["reason"] == "NoRoute"
    assert "'painter'" in failure["message"]
    assert sink.status["succeeded"] == 3


async def test_duplicate_ids_fail_only_the_duplicate() -> None:
    """A second item with an id already used fails as DuplicateId; the first keeps its output."""
    items = [{"id": "a", "v": 1}, {"id": "b", "v": 2}, {"id": "a", "v": 3}]
    engine, _, _, invoker, sink = build(items, item_id="id", failures="Report")
    await engine.run()
    assert sink.status["items"]["a"] == {"echo": {"id": "a", "v": 1}}
    assert sink.status["items"]["b"] == {"echo": {"id": "b", "v": 2}}
    failure = sink.status["failures"]["a[2]"]
    assert failure["reason"] == "DuplicateId"
    assert "index 2" in failure["message"]
    assert len(invoker.calls) == 2
    assert (sink.status["total"], sink.status["failed"]) == (3, 1)


async def test_each_agent_gets_the_envelope() -> None:
    """The agent gets id, item, run input, attempt and run name."""
    engine, _, _, invoker, _ = build([{"id": "x", "q": 1}], item_id="id", input={"model": "m"})
    await engine.run()
    assert invoker.envelopes == [
        {
            "id": "x",
            "item": {"id": "x", "q": 1},
            "input": {"model": "m"},
            "attempt": 1,
            "run": "run",
        }
    ]


async def test_cast_mode_counts_items_delivered() -> None:
    """In Cast mode an accepted hand-over counts the item delivered."""
    seen: list[bool] = []

    def cast(envelope: EnvelopeBody, agent: str) -> tuple[float, Result]:
        return 0.01, Result(ok=True, output=None)

    engine, _, _, invoker, sink = build([1, 2], mode="Cast", behaviour=cast)
    original = invoker.invoke

    async def spy(checkout: Any, envelope: EnvelopeBody, *, timeout: float, cast: bool) -> Any:
        seen.append(cast)
        return await original(checkout, envelope, timeout=timeout, cast=cast)

    invoker.invoke = spy  # type: ignore[method-assign]
    outcome = await engine.run()
    assert outcome.phase == "Succeeded"
    assert seen == [True, True]
    assert sink.status["succeeded"] == 2


async def test_lost_agents_are_checked_in_lost() -> None:
    """An attempt whose agent is lost (timed out) checks the agent in as lost, to be retired."""

    def timeout(envelope: EnvelopeBody, agent: str) -> tuple[float, Result]:
        return 1.0, Result(ok=False, reason="CallTimeout", message="no answer", lost=True)

    engine, _, dispatcher, _, sink = build([1], behaviour=timeout, failures="Report")
    await engine.run()
    assert [outcome for _, outcome in dispatcher.checkins] == ["lost"]
    assert sink.status["failures"]["0"]["reason"] == "CallTimeout"


async def test_results_iterate_from_status() -> None:
    """iter_results gives every output and failure recorded in status."""
    items = [{"id": f"i{n}", "fail": n == 2} for n in range(5)]
    engine, _, _, _, sink = build(items, item_id="id", failures="Report", behaviour=fail_marked())
    await engine.run()
    records = list(iter_results(sink.status, sink.result_configmaps()))
    assert sorted(record["id"] for record in records) == [f"i{n}" for n in range(5)]
    assert [r["failure"]["reason"] for r in records if "failure" in r] == ["HandlerError"]


async def test_suspend_finishes_in_flight_items_and_resume_goes_on() -> None:
    """Suspending lets in-flight items finish and starts no more; resuming drains the rest."""
    engine, clock, _, invoker, sink = build(list(range(20)), cap=3, behaviour=echo(1.0))
    suspended_at: list[int] = []

    def suspend_after(calls: int) -> None:
        if calls >= 5 and not suspended_at:
            engine.set_suspended(True)
            suspended_at.append(len(invoker.calls))

    invoker.on_call = suspend_after
    task = asyncio.ensure_future(engine.run())
    await wait_for(lambda: sink.status.get("phase") == "Suspended")
    calls_when_suspended = len(invoker.calls)
    assert calls_when_suspended == suspended_at[0]
    assert sink.status["active"] == 0
    suspended = next(c for c in sink.status["conditions"] if c["type"] == "Suspended")
    assert suspended["status"] == "True"
    # Time passes while suspended and nothing is dispatched.
    await clock.sleep(60)
    assert len(invoker.calls) == calls_when_suspended
    engine.set_suspended(False)
    outcome = await task
    assert (outcome.phase, outcome.result) == ("Succeeded", "Drained")
    assert sink.status["succeeded"] == 20
    assert sorted(invoker.runs.values()) == [1] * 20
    reasons = sink.reasons()
    assert reasons.index("Suspended") < reasons.index("Resumed") < reasons.index("Drained")


async def test_item_failed_events_are_rate_limited() -> None:
    """Many failures at once post one ItemFailed event, the next one counting those held back."""
    engine, _, _, _, sink = build(
        [{"fail": True}] * 30, cap=10, failures="Report", behaviour=fail_marked(0.1)
    )
    await engine.run()
    failed_events = [message for _, reason, message in sink.events if reason == "ItemFailed"]
    assert 1 <= len(failed_events) <= 3
    assert sink.status["failed"] == 30


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cap=st.integers(min_value=1, max_value=6),
    agents=st.integers(min_value=1, max_value=8),
    durations=st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=40),
    failing=st.sets(st.integers(min_value=0, max_value=39)),
)
def test_cap_is_never_exceeded_and_every_item_is_recorded_once(
    cap: int, agents: int, durations: list[int], failing: set[int]
) -> None:
    """Whatever the cap, pool size, call durations and failures: never more than cap items in
    flight, and every item recorded exactly once with the right verdict."""

    def behave(envelope: EnvelopeBody, agent: str) -> tuple[float, Result]:
        n = envelope["item"]["n"]
        if n in failing and envelope["attempt"] == 1:
            return durations[n] / 10, Result(ok=False, reason="HandlerError", message="no")
        return durations[n] / 10, Result(ok=True, output=n)

    items = [{"n": n} for n in range(len(durations))]

    async def scenario() -> None:
        engine, _, dispatcher, invoker, sink = build(
            items,
            cap=cap,
            pools={"workers": agents},
            behaviour=behave,
            failures="Report",
            max_attempts=2 if cap % 2 else 1,
            checkout_timeout_seconds=1000,
        )
        await engine.run()
        assert invoker.most_active <= cap
        # A retry may hold a second agent for the instant it takes to swap the failed one.
        assert dispatcher.most_held <= 2 * cap
        recorded = set(sink.status.get("items", {})) | set(sink.status.get("failures", {}))
        assert recorded == {str(n) for n in range(len(items))}
        assert sink.status["succeeded"] + sink.status["failed"] == len(items)
        expected_failed = 0 if cap % 2 else len([n for n in failing if n < len(items)])
        assert sink.status["failed"] == expected_failed

    # A sync test (hypothesis runs each example) on a loop of its own, on looptime's fake time.
    with asyncio.Runner(loop_factory=looptime.new_event_loop) as runner:
        runner.run(scenario())


async def wait_for(condition: Callable[[], bool], *, deadline: float = 10.0) -> None:
    """Wait, up to ``deadline`` seconds of loop time, for a condition the running tasks will make
    true."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    while not condition():
        assert loop.time() < end, "condition not met before the deadline"
        await asyncio.sleep(0.001)


async def test_an_agent_refusing_the_operators_token_fails_no_item() -> None:
    """An agent answering 401 (it holds another token than the operator) is the operator's
    problem: it is checked in as lost (so the pool replaces it), the item goes to another agent
    without counting an attempt, and an AgentUnauthorized event says so."""
    refusals = {"left": 3}

    def behave(envelope: EnvelopeBody, agent: str) -> tuple[float, Result]:
        if agent == "workers-1" and refusals["left"]:
            refusals["left"] -= 1
            return 0.05, Result(ok=False, reason="Unauthorized", message="bad token")
        return 0.1, Result(ok=True, output={"echo": envelope["item"]})

    items = [{"id": f"i{n}"} for n in range(5)]
    engine, _, dispatcher, _, sink = build(
        items, behaviour=behave, item_id="id", pools={"workers": 2}
    )
    outcome = await engine.run()
    assert outcome.phase == "Succeeded"
    assert (sink.status["succeeded"], sink.status["failed"], sink.status["retries"]) == (5, 0, 0)
    assert ("workers-1", "lost") in dispatcher.checkins
    assert "AgentUnauthorized" in sink.reasons()
