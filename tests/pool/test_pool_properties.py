"""Invariants of the pool core, over generated pools: the rules hold for every input, not a few."""

from __future__ import annotations

import itertools

from choosing import choose_agent
from hypothesis import given, settings
from hypothesis import strategies as st

from agentpool.pool import (
    ObservedAgent,
    PoolPolicy,
    Waiter,
    available_agents,
    compute_status,
    order_waiters,
    plan,
)
from agentpool.pool.plan import lost


@st.composite
def policies(draw: st.DrawFn) -> PoolPolicy:
    min_size = draw(st.integers(0, 5))
    return PoolPolicy(
        min_size=min_size,
        max_size=draw(st.integers(min_size, min_size + 5)),
        strategy=draw(st.sampled_from(["LIFO", "FIFO"])),
        min_idle=draw(st.integers(0, 3)),
        idle_timeout_seconds=draw(st.sampled_from([0.0, 10.0, 60.0])),
        max_uses=draw(st.integers(0, 4)),
        max_lifetime_seconds=draw(st.sampled_from([0.0, 50.0, 200.0])),
        quarantine_after_failures=draw(st.integers(0, 3)),
        template_hash=draw(st.sampled_from(["", "h1"])),
        slots=draw(st.sampled_from([1, 2, 4])),
    )


@st.composite
def agent_lists(draw: st.DrawFn) -> list[ObservedAgent]:
    count = draw(st.integers(0, 12))
    agents = []
    for index in range(count):
        was_ready = draw(st.booleans())
        busy_slots = draw(st.integers(0, 5))
        agents.append(
            ObservedAgent(
                name=f"agent-{index}",
                created_at=draw(st.floats(0, 100)),
                ready=draw(st.booleans()) if was_ready else False,
                ready_at=draw(st.floats(0, 100)) if was_ready else None,
                busy=busy_slots > 0 or draw(st.booleans()),
                busy_slots=busy_slots,
                slots=draw(st.sampled_from([1, 2, 4])),
                uses=draw(st.integers(0, 6)),
                idle_since=draw(st.none() | st.floats(0, 200)),
                idle_seq=draw(st.integers(0, 20)),
                consecutive_failures=draw(st.integers(0, 4)),
                quarantined=draw(st.booleans()),
                failed=draw(st.booleans()),
                lost=draw(st.booleans()),
                deleting=(deleting := draw(st.booleans())),
                gone_by=draw(st.none() | st.floats(0, 400)) if deleting else None,
                unschedulable=draw(st.booleans()),
                template_hash=draw(st.sampled_from(["", "h1"])),
            )
        )
    return agents


waiter_lists = st.lists(
    st.builds(Waiter, priority=st.integers(-3, 3), seq=st.integers(0, 1000), whole=st.booleans()),
    max_size=10,
    unique_by=lambda waiter: waiter.seq,
)
nows = st.floats(100, 400)


def showing_not_ready(agents: list[ObservedAgent], retired: tuple[str, ...], now: float) -> int:
    """The pods a watcher sees not Ready once the plan is applied: every pod but the Ready agents
    kept; a failed pod kept for a look, a pod being deleted and a Ready agent retired (its pod
    turns not Ready on its way out) all count, but a pod being deleted and still there well past
    its grace period, lost with its node."""
    return sum(
        1 for a in agents if not (a.live and a.ready and a.name not in retired) and not lost(a, now)
    )


@settings(max_examples=400, deadline=None)
@given(policy=policies(), agents=agent_lists(), waiters=waiter_lists, now=nows)
def test_plan_stays_within_sizes_and_spares_busy_agents(
    policy: PoolPolicy,
    agents: list[ObservedAgent],
    waiters: list[Waiter],
    now: float,
) -> None:
    """Never more than maxSize (unless busy agents alone exceed it, or a rollout surges past
    it by maxSurge), never fewer than minSize (unless maxUnready holds creation back, with pods
    still within their grace), never a busy agent retired, never an agent retired twice or
    created and timed out at once; and a pod lost with its node weighs on nothing."""
    result = plan(policy, agents, waiters, now)
    assert plan(policy, [a for a in agents if not lost(a, now)], waiters, now) == result
    live = [agent for agent in agents if agent.live]
    by_name = {agent.name: agent for agent in agents}
    busy = sum(agent.busy for agent in live)
    planned = len(live) + result.create - len(result.retire)
    rolling = any(agent.template_hash != policy.template_hash for agent in live)
    surge = policy.rollout_bounds(result.desired)[0] if policy.template_hash and rolling else 0

    assert planned <= max(policy.max_size + surge, busy)
    not_ready = showing_not_ready(agents, result.retired_names, now) + result.create
    assert planned >= policy.min_size or not_ready >= policy.max_unready
    assert result.create >= 0
    assert len(set(result.retired_names)) == len(result.retire)
    for retirement in result.retire:
        agent = by_name[retirement.name]
        assert not agent.busy
        assert agent.live
    if result.create:
        # No churn: a pod of the current template is never made while another of that template
        # goes for idling or scale-down. An outdated one may go as its replacement comes.
        assert not any(
            r.reason in ("IdleTimeout", "ScaledDown")
            and by_name[r.name].template_hash == policy.template_hash
            for r in result.retire
        )


@settings(max_examples=400, deadline=None)
@given(policy=policies(), agents=agent_lists(), waiters=waiter_lists, now=nows)
def test_status_never_counts_more_ready_than_it_counts_agents(
    policy: PoolPolicy,
    agents: list[ObservedAgent],
    waiters: list[Waiter],
    now: float,
) -> None:
    """The Ready message's "N of M agents ready, K idle" has K <= N <= M, and the state is Ready
    exactly when an agent is available."""
    status = compute_status(policy, agents, waiters, now)
    words = status.conditions[0].message.split()
    ready, wanted, idle = int(words[0]), int(words[2]), int(words[5])
    assert (ready, idle) == (status.ready_replicas, status.available)
    assert idle <= ready <= wanted
    assert (status.state == "Ready") == (status.available > 0)


@settings(max_examples=300, deadline=None)
@given(waiters=waiter_lists)
def test_waiters_served_by_priority_then_arrival(waiters: list[Waiter]) -> None:
    """Every waiter is served once, higher priority first, arrival order within a priority."""
    ordered = order_waiters(waiters)
    assert sorted(ordered, key=lambda w: w.seq) == sorted(waiters, key=lambda w: w.seq)
    for first, second in itertools.pairwise(ordered):
        assert first.priority > second.priority or (
            first.priority == second.priority and first.seq < second.seq
        )


@settings(max_examples=300, deadline=None)
@given(
    waiters=st.lists(
        st.builds(
            Waiter,
            priority=st.integers(-3, 3),
            seq=st.integers(0, 1000),
            since=st.floats(0, 100) | st.sampled_from([5.0, 6.0]),
        ),
        max_size=10,
        unique_by=lambda waiter: waiter.seq,
    )
)
def test_waiters_served_by_priority_then_wait_then_arrival(waiters: list[Waiter]) -> None:
    """Within a priority, a waiter whose wait began earlier goes first, however late it came;
    waits that began together go in arrival order."""
    ordered = order_waiters(waiters)
    assert sorted(ordered, key=lambda w: w.seq) == sorted(waiters, key=lambda w: w.seq)
    for first, second in itertools.pairwise(ordered):
        assert first.since is not None
        assert second.since is not None
        assert first.priority >= second.priority
        if first.priority == second.priority:
            assert first.since <= second.since
            if first.since == second.since:
                assert first.seq < second.seq


@settings(max_examples=300, deadline=None)
@given(
    stamps=st.lists(st.integers(0, 10_000), min_size=1, max_size=12, unique=True),
    strategy=st.sampled_from(["LIFO", "FIFO"]),
)
def test_lifo_and_fifo_orders_exact(stamps: list[int], strategy: str) -> None:
    """LIFO hands agents out newest-returned first, FIFO oldest-returned first, every time."""
    policy = PoolPolicy(min_size=0, max_size=len(stamps), strategy=strategy)  # type: ignore[arg-type]
    agents = [
        ObservedAgent(f"a{i}", ready=True, ready_at=0.0, idle_since=float(stamp))
        for i, stamp in enumerate(stamps)
    ]
    expected = sorted(agents, key=lambda a: a.idle_since or 0.0, reverse=strategy == "LIFO")
    assert available_agents(policy, agents) == expected

    # Taking agents one by one yields the same order.
    remaining = list(agents)
    taken = []
    while (name := choose_agent(policy, remaining)) is not None:
        taken.append(name)
        remaining = [agent for agent in remaining if agent.name != name]
    assert taken == [agent.name for agent in expected]
