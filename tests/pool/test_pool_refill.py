"""Bounded refill: a pool never has more than maxUnready agents not Ready yet, so agents that
never turn Ready hold a few pods, not the whole pool; and it never creates fewer than it may
while its agents do turn Ready, so a healthy pool still fills."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st
from test_pool_properties import agent_lists, nows, policies, waiter_lists

from agentpool.pool import ObservedAgent, PoolPolicy, Waiter, plan


def unready_after(agents: list[ObservedAgent], retired: tuple[str, ...]) -> int:
    """Agents not Ready among those the plan keeps."""
    return sum(1 for a in agents if a.live and a.name not in retired and not a.ready)


@settings(max_examples=500, deadline=None)
@given(
    policy=policies(),
    max_unready=st.integers(1, 6),
    agents=agent_lists(),
    waiters=waiter_lists,
    now=nows,
)
def test_a_plan_never_starts_more_than_max_unready_agents_nor_fewer_than_it_may(
    policy: PoolPolicy,
    max_unready: int,
    agents: list[ObservedAgent],
    waiters: list[Waiter],
    now: float,
) -> None:
    policy = dataclasses.replace(policy, max_unready=max_unready)
    decided = plan(policy, agents, waiters, now)
    unready = unready_after(agents, decided.retired_names)
    # What the plan would create with no bound: the agents missing, or a rollout's surge.
    wanted = plan(dataclasses.replace(policy, max_unready=10**6), agents, waiters, now).create
    # Never more than maxUnready not Ready once the new pods exist (none while already past it).
    assert decided.create == 0 or unready + decided.create <= max_unready
    # Never fewer than wanted unless maxUnready is what stops it.
    assert decided.create == min(wanted, max(0, max_unready - unready))


@settings(max_examples=200, deadline=None)
@given(
    size=st.integers(1, 40),
    max_unready=st.integers(1, 12),
    ready_after=st.integers(1, 3),
)
def test_a_healthy_pool_fills_at_max_unready_per_cold_start(
    size: int, max_unready: int, ready_after: int
) -> None:
    """Each pass creates what the plan says; pods turn Ready ``ready_after`` passes after they
    were created. The pool never has more than maxUnready starting, and is full after about
    size / maxUnready cold starts."""
    policy = PoolPolicy(min_size=size, max_size=size, max_unready=max_unready)
    born: dict[str, int] = {}
    step = 0
    while True:
        agents = [
            ObservedAgent(name=name, created_at=float(at), ready=step - at >= ready_after)
            for name, at in born.items()
        ]
        assert sum(1 for a in agents if not a.ready) <= max_unready
        if len(agents) == size and all(a.ready for a in agents):
            break
        for _ in range(plan(policy, agents, [], float(step)).create):
            born[f"a{len(born)}"] = step
        step += 1
    assert len(born) == size
    batches = -(-size // max_unready)
    assert step <= batches * ready_after + 1


def test_agents_that_never_turn_ready_hold_max_unready_pods() -> None:
    """minSize 10, maxUnready 2, no agent ever turns Ready: two pods, however many passes."""
    policy = PoolPolicy(min_size=10, max_size=10, max_unready=2)
    agents: list[ObservedAgent] = []
    for step in range(100):
        decided = plan(policy, agents, [], float(step))
        agents += [
            ObservedAgent(name=f"a{len(agents)}", created_at=step) for _ in range(decided.create)
        ]
    assert len(agents) == 2
    assert plan(policy, agents, [], 100.0).desired == 10


def test_a_burst_of_waiters_starts_at_most_max_unready_overflow_agents() -> None:
    policy = PoolPolicy(min_size=1, max_size=20, max_unready=3)
    idle = ObservedAgent(name="a0", ready=True, ready_at=0.0, busy=True, busy_slots=1)
    waiters = [Waiter(priority=0, seq=seq) for seq in range(12)]
    decided = plan(policy, [idle], waiters, 10.0)
    assert decided.desired == 13
    assert decided.create == 3
