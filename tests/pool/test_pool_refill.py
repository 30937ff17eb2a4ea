"""Bounded refill: a pool never has more than maxUnready pods not Ready, as a watcher of its pods
counts them (starting, failed and kept for a look, or on their way out), so agents that never
turn Ready hold a few pods, not the whole pool; and it never creates fewer than it may while its
agents do turn Ready, so a healthy pool still fills. Kept failed pods give way, oldest first,
when they are what holds the pool's agents back."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_pool_properties import agent_lists, nows, policies, showing_not_ready, waiter_lists

from agentpool.api.reasons import RetireReason
from agentpool.pool import ObservedAgent, PoolPolicy, Waiter, plan


@st.composite
def kept_pods(draw: st.DrawFn, agents: list[ObservedAgent]) -> dict[str, float]:
    """Some of the failed pods on their way out, kept for a look, each with when it failed."""
    failed = [
        agent.name for agent in agents if agent.failed and agent.deleting and agent.gone_by is None
    ]
    names = draw(st.lists(st.sampled_from(failed), unique=True)) if failed else []
    return {name: draw(st.floats(0, 100)) for name in names}


@settings(max_examples=500, deadline=None)
@given(
    policy=policies(),
    max_unready=st.integers(1, 6),
    agents=agent_lists(),
    waiters=waiter_lists,
    now=nows,
    data=st.data(),
)
def test_a_plan_never_shows_more_than_max_unready_pods_nor_starts_fewer_than_it_may(
    policy: PoolPolicy,
    max_unready: int,
    agents: list[ObservedAgent],
    waiters: list[Waiter],
    now: float,
    data: st.DataObject,
) -> None:
    """Once the plan's pods exist and its retired agents are on their way out, the pods not
    Ready (kept failed ones and those being deleted included) are at most maxUnready whenever
    the plan creates a pod or a rollout retires a Ready agent; it creates all it wants unless
    maxUnready is what stops it; and only then do kept failed pods give way, the oldest,
    no more than the agents and Ready outdated retirements it holds back less the pods already
    going."""
    policy = dataclasses.replace(policy, max_unready=max_unready)
    kept = data.draw(kept_pods(agents))
    decided = plan(policy, agents, waiters, now, kept=kept)
    not_ready = showing_not_ready(agents, decided.retired_names, now)
    by_name = {agent.name: agent for agent in agents}
    rolled = [
        r.name
        for r in decided.retire
        if r.reason == RetireReason.OUTDATED and by_name[r.name].ready
    ]
    if decided.create or rolled:
        assert not_ready + decided.create <= max_unready
    # What the plan would do with no bound: the agents missing, or a rollout's surge.
    unbounded = plan(dataclasses.replace(policy, max_unready=10**6), agents, waiters, now)
    held_back = set(unbounded.retired_names) - set(decided.retired_names)
    if not held_back:
        assert decided.create == min(unbounded.create, max(0, max_unready - not_ready))
    else:
        # Only Ready outdated agents are held back, and only when no room is left.
        assert all(
            by_name[name].ready and by_name[name].template_hash != policy.template_hash
            for name in held_back
        )
        assert not_ready + decided.create >= max_unready
    assert set(decided.give_way) <= set(kept)
    assert len(decided.give_way) <= max(0, unbounded.create - decided.create) + len(held_back)
    if decided.give_way:
        last = max(kept[name] for name in decided.give_way)
        assert all(kept[name] >= last for name in set(kept) - set(decided.give_way))


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


def old_agents(count: int) -> list[ObservedAgent]:
    """Ready idle agents on a template the pool no longer has."""
    return [
        ObservedAgent(name=f"old-{n}", ready=True, ready_at=0.0, template_hash="h0")
        for n in range(count)
    ]


def kept_failed(*names: str) -> list[ObservedAgent]:
    """Failed agents already retired, their pods kept for a look."""
    return [
        ObservedAgent(name=name, failed=True, deleting=True, template_hash="h1") for name in names
    ]


ROLLING = PoolPolicy(min_size=3, max_size=3, max_unavailable=1, max_unready=2, template_hash="h1")


@pytest.mark.parametrize(
    ("agents", "kept", "create", "retired", "give_way"),
    [
        # A rollout begins: the Ready agent it retires shows not Ready on its way out, so one
        # new pod starts beside it, not two.
        (old_agents(3), {}, 1, ["old-0"], []),
        # Two failed new pods kept for a look fill maxUnready: no old agent goes, nothing
        # starts, and both give way, oldest first: one to the next new pod, one to the old
        # agent the rollout retires.
        (
            old_agents(3) + kept_failed("new-a", "new-b"),
            {"new-a": 20.0, "new-b": 10.0},
            0,
            [],
            ["new-b", "new-a"],
        ),
        # One kept pod and one new pod starting: the surge has a place for one more, so the
        # kept pod gives way and the next new pod starts once it is gone.
        (
            old_agents(2)
            + kept_failed("new-a")
            + [ObservedAgent(name="new-c", template_hash="h1")],
            {"new-a": 10.0},
            0,
            [],
            ["new-a"],
        ),
        # Pods on their way out make room by themselves for the one new pod the surge has a
        # place for and the old agent the rollout retires next: the kept pod stays for a look.
        (
            old_agents(3)
            + kept_failed("new-a")
            + [
                ObservedAgent(name=f"old-{n}", ready=True, deleting=True, template_hash="h0")
                for n in (8, 9)
            ],
            {"new-a": 10.0},
            0,
            [],
            [],
        ),
    ],
)
def test_a_rollout_of_a_crashing_template_stays_within_max_unready(
    agents: list[ObservedAgent],
    kept: dict[str, float],
    create: int,
    retired: list[str],
    give_way: list[str],
) -> None:
    """Three agents, maxUnavailable 1, maxUnready 2, a new template whose agents fail: at most
    two pods not Ready at once whenever the plan moves, two old agents serving, and kept failed
    pods give way to new agents only when they are what holds them back."""
    decided = plan(ROLLING, agents, [], 100.0, kept=kept)
    assert (decided.create, list(decided.retired_names), list(decided.give_way)) == (
        create,
        retired,
        give_way,
    )
    if decided.create or decided.retire:
        assert showing_not_ready(agents, decided.retired_names, 100.0) + decided.create <= 2


def test_a_refill_makes_the_oldest_kept_pods_it_needs_room_for_give_way() -> None:
    """minSize 4, maxUnready 2: two agents failed and are kept, two are Ready. The pool wants
    two more and has no room: the two kept pods give way, oldest first, and creation waits for
    them to go; with one of them already gone, one agent starts and the other kept pod stays."""
    policy = PoolPolicy(min_size=4, max_size=4, max_unready=2)
    ready = [ObservedAgent(name=f"a{n}", ready=True, ready_at=0.0) for n in range(2)]
    kept = {"f1": 30.0, "f2": 20.0}
    decided = plan(policy, ready + kept_failed("f1", "f2"), [], 100.0, kept=kept)
    assert (decided.create, decided.give_way) == (0, ("f2", "f1"))
    decided = plan(policy, ready + kept_failed("f1"), [], 100.0, kept={"f1": 30.0})
    assert (decided.create, decided.give_way) == (1, ("f1",))


@pytest.mark.parametrize(
    ("now", "create"),
    [
        # Within their grace (gone by 40, counted to 70) the ten pods on their way out fill
        # maxUnready: nothing starts yet.
        (60.0, 0),
        # Well past it their node is lost and they may stay Terminating for good: they no
        # longer count, and the ten missing agents start.
        (70.0, 10),
        (10_000.0, 10),
    ],
)
def test_pods_lost_with_their_node_stop_blocking_the_refill(now: float, create: int) -> None:
    """minSize 12, maxUnready 10: a node died with ten agents, whose pods were deleted at 10
    with a grace of 30 s and stay Terminating; two agents are Ready elsewhere."""
    policy = PoolPolicy(min_size=12, max_size=12)
    agents = [
        ObservedAgent(name=f"lost-{n}", ready_at=1.0, deleting=True, gone_by=40.0)
        for n in range(10)
    ] + [ObservedAgent(name=f"ok-{n}", ready=True, ready_at=1.0) for n in range(2)]
    assert policy.max_unready == 10
    decided = plan(policy, agents, [], now)
    assert (decided.create, decided.retire, decided.give_way) == (create, (), ())


def test_a_kept_pod_gives_way_to_a_rollout_that_used_its_surge() -> None:
    """maxUnready 1, three old agents Ready and the one new agent the surge allows Ready too,
    one failed pod kept for a look: no new pod may start until an old agent goes, and none goes
    while the kept pod fills maxUnready, so the kept pod gives way rather than stall the rollout
    for as long as it is kept."""
    policy = PoolPolicy(
        min_size=3,
        max_size=3,
        template_hash="new",
        max_surge=1,
        max_unavailable=0,
        max_unready=1,
    )
    agents = [
        ObservedAgent(name=f"old-{n}", ready=True, ready_at=1.0, template_hash="old")
        for n in range(3)
    ] + [
        ObservedAgent(name="new-0", created_at=2.0, ready=True, ready_at=5.0, template_hash="new"),
        ObservedAgent(name="crashed", failed=True, deleting=True, template_hash="old"),
    ]
    decided = plan(policy, agents, [], 10.0, kept={"crashed": 8.0})
    assert (decided.create, decided.retire, decided.give_way) == (0, (), ("crashed",))
    # Once it is gone, the rollout goes on: an old agent retires.
    decided = plan(policy, agents[:-1], [], 10.0, kept={})
    assert (decided.create, decided.retired_names, decided.give_way) == (0, ("old-0",), ())
