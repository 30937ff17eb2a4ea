"""Rollouts of a changed pod template, stepped through the pure planner: new agents start
first within maxSurge, outdated idle agents go only while the Ready agents stay at least the
desired count less maxUnavailable, busy agents finish their items, and the roll ends with every
agent on the new template. Hypothesis drives the pool through arbitrary interleavings of pods
turning Ready and items starting and ending."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentpool.pool import ConditionView, ObservedAgent, PoolPolicy, compute_status, plan
from agentpool.pool.checkout import available_agents, first_available, handout_order
from agentpool.pool.rollout import restored_mark, track_progress

NOW = 1000.0
OLD, NEW = "old", "new"


def bounds() -> st.SearchStrategy[int | str]:
    return st.one_of(st.integers(0, 4), st.sampled_from(["0%", "10%", "25%", "50%", "100%"]))


@st.composite
def rollout_policies(draw: st.DrawFn) -> PoolPolicy:
    size = draw(st.integers(1, 12))
    surge, unavailable = draw(bounds()), draw(bounds())
    if str(surge).strip("%") == "0" and str(unavailable).strip("%") == "0":
        surge = 1
    return PoolPolicy(
        min_size=size,
        max_size=size,
        template_hash=NEW,
        max_surge=surge,
        max_unavailable=unavailable,
        idle_timeout_seconds=0.0,
    )


class Pool:
    """A pool of agents the test moves by hand: plans applied, pods turning Ready, work."""

    def __init__(self, policy: PoolPolicy, busy: set[int]) -> None:
        self.policy = policy
        self.serial = 0
        self.agents: dict[str, ObservedAgent] = {}
        for index in range(policy.min_size):
            self.add(OLD, ready=True, busy=index in busy)

    def add(self, template: str, *, ready: bool = False, busy: bool = False) -> None:
        name = f"{template}-{self.serial}"
        self.serial += 1
        self.agents[name] = ObservedAgent(
            name,
            created_at=NOW,
            ready=ready,
            ready_at=NOW if ready else None,
            idle_since=NOW if ready and not busy else None,
            busy=busy,
            busy_slots=int(busy),
            template_hash=template,
        )

    def ready(self) -> int:
        return sum(agent.ready for agent in self.agents.values())

    def step(self) -> tuple[int, int, int]:
        """Apply one plan; returns (desired, maxSurge, maxUnavailable) as the plan resolved
        them."""
        decided = plan(self.policy, self.agents.values(), (), NOW)
        for name in decided.retired_names:
            assert not self.agents[name].busy, f"{name} was retired while busy"
            del self.agents[name]
        for _ in range(decided.create):
            self.add(NEW)
        return decided.desired, *self.policy.rollout_bounds(decided.desired)

    def turn_ready(self, name: str) -> None:
        agent = self.agents[name]
        self.agents[name] = dataclasses.replace(agent, ready=True, ready_at=NOW, idle_since=NOW)

    def set_busy(self, name: str, busy: bool) -> None:
        agent = self.agents[name]
        self.agents[name] = dataclasses.replace(
            agent, busy=busy, busy_slots=int(busy), idle_since=None if busy else NOW
        )


@settings(max_examples=300, deadline=None)
@given(policy=rollout_policies(), data=st.data())
def test_a_rollout_keeps_its_bounds_and_converges(policy: PoolPolicy, data: st.DataObject) -> None:
    """At no step do Ready agents fall below desired - maxUnavailable (unless they were below
    already), never are there more than desired + maxSurge pods, never is a busy agent retired;
    and once new pods turn Ready and items end, every agent is on the new template."""
    busy = data.draw(st.sets(st.integers(0, policy.min_size - 1)))
    pool = Pool(policy, busy)
    for _ in range(data.draw(st.integers(1, 30))):
        before = pool.ready()
        desired, surge, unavailable = pool.step()
        assert pool.ready() >= min(before, desired - unavailable)
        assert len(pool.agents) <= max(desired + surge, policy.min_size)
        # The world moves: some new pods turn Ready, some items end, some start.
        names = sorted(pool.agents)
        # hypothesis refuses to sample from nothing: with no pod left, none turns Ready.
        turning = st.lists(st.sampled_from(names), unique=True) if names else st.just([])
        for name in data.draw(turning):
            agent = pool.agents[name]
            if not agent.ready:
                pool.turn_ready(name)
            else:
                pool.set_busy(name, not agent.busy)

    # Then every pod turns Ready and every item ends: the roll completes.
    for _ in range(4 * policy.min_size + 4):
        for name, agent in list(pool.agents.items()):
            if not agent.ready:
                pool.turn_ready(name)
            if agent.busy:
                pool.set_busy(name, False)
        pool.step()
    templates = [agent.template_hash for agent in pool.agents.values()]
    assert templates == [NEW] * policy.min_size


@settings(max_examples=200, deadline=None)
@given(policy=rollout_policies())
def test_a_template_that_never_turns_ready_stops_at_max_unavailable(policy: PoolPolicy) -> None:
    """New pods that never turn Ready halt the roll with desired - maxUnavailable outdated agents
    still Ready, and no more than desired + maxSurge pods: the old agents keep serving."""
    pool = Pool(policy, set())
    for _ in range(2 * policy.min_size + 4):
        desired, surge, unavailable = pool.step()
    old = [agent for agent in pool.agents.values() if agent.template_hash == OLD]
    assert len(old) == max(0, desired - unavailable)
    assert all(agent.ready for agent in old)
    assert len(pool.agents) <= desired + surge
    assert len(available_agents(policy, pool.agents.values(), now=NOW)) == len(old)


@pytest.mark.parametrize(
    ("surge", "unavailable", "creates", "retires"),
    [
        # Of 10: surge rounds up to 3, unavailable down to 2: 13 pods, 8 of them Ready.
        ("25%", "25%", 5, 2),
        (0, 1, 1, 1),  # replace one at a time, never above 10 pods
        (2, 0, 2, 0),  # start two, retire none until they are Ready
        ("100%", 0, 10, 0),  # blue-green: a whole new pool first
    ],
)
def test_first_step_of_a_rollout_of_ten(
    surge: int | str, unavailable: int | str, creates: int, retires: int
) -> None:
    """The first pass over ten idle outdated agents, as a Deployment of ten would take it."""
    policy = PoolPolicy(
        min_size=10,
        max_size=10,
        template_hash=NEW,
        max_surge=surge,
        max_unavailable=unavailable,
    )
    pool = Pool(policy, set())
    decided = plan(policy, pool.agents.values(), (), NOW)
    assert (decided.create, len(decided.retire)) == (creates, retires)
    assert {retirement.reason for retirement in decided.retire} <= {"Outdated"}


def test_outdated_idle_agents_keep_serving_and_busy_ones_take_no_new_item() -> None:
    """During a roll an idle outdated agent is handed out, so the pool keeps its throughput; an
    outdated agent with several slots that holds work takes no new item, so that it drains."""
    policy = PoolPolicy(min_size=2, max_size=2, template_hash=NEW, slots=4)
    idle = ObservedAgent("a", ready=True, idle_since=1.0, template_hash=OLD, slots=4)
    draining = ObservedAgent(
        "b", ready=True, busy=True, busy_slots=1, idle_since=2.0, template_hash=OLD, slots=4
    )
    assert [agent.name for agent in available_agents(policy, [idle, draining])] == ["a"]


def _progressing(view_conditions: list[ConditionView]) -> ConditionView:
    (condition,) = [c for c in view_conditions if c.type == "Progressing"]
    return condition


def test_status_reports_a_rollout_from_start_to_complete() -> None:
    """updatedReplicas counts agents on the current template; Progressing says RollingOut while
    outdated agents remain and RolloutComplete once none is left, as a Deployment says."""
    policy = PoolPolicy(min_size=2, max_size=2, template_hash=NEW)
    pool = Pool(policy, set())
    view = compute_status(policy, list(pool.agents.values()), [], NOW)
    assert view.updated_replicas == 0
    assert _progressing(view.conditions).reason == "RollingOut"
    for _ in range(6):
        pool.step()
        for name, agent in list(pool.agents.items()):
            if not agent.ready:
                pool.turn_ready(name)
    view = compute_status(policy, list(pool.agents.values()), [], NOW)
    assert view.updated_replicas == 2
    progressing = _progressing(view.conditions)
    assert (progressing.status, progressing.reason) == ("True", "RolloutComplete")
    assert "2 of 2 agents updated" in progressing.message


def test_a_stuck_rollout_says_so_after_the_deadline_and_names_the_new_pods() -> None:
    """New pods that never turn Ready: RollingOut until progressDeadlineSeconds pass without
    progress, then Progressing False ProgressDeadlineExceeded naming the un-Ready new pods; any
    progress starts the clock again."""
    policy = PoolPolicy(
        min_size=4, max_size=4, template_hash=NEW, max_surge=1, progress_deadline_seconds=60
    )
    pool = Pool(policy, set())
    for _ in range(4):
        pool.step()
    agents = list(pool.agents.values())
    mark = track_progress(None, policy, agents, NOW)
    assert track_progress(mark, policy, agents, NOW + 59) is mark
    before = _progressing(compute_status(policy, agents, [], NOW + 59, rollout=mark).conditions)
    assert (before.status, before.reason) == ("True", "RollingOut")

    stuck = _progressing(compute_status(policy, agents, [], NOW + 60, rollout=mark).conditions)
    assert (stuck.status, stuck.reason) == ("False", "ProgressDeadlineExceeded")
    new = sorted(agent.name for agent in agents if agent.template_hash == NEW)
    assert new
    assert f"new agents not Ready: {', '.join(new)}" in stuck.message
    assert "outdated agents keep serving" in stuck.message

    pool.turn_ready(new[0])
    moved = track_progress(mark, policy, list(pool.agents.values()), NOW + 61)
    assert moved.since == NOW + 61
    again = compute_status(policy, list(pool.agents.values()), [], NOW + 61, rollout=moved)
    assert _progressing(again.conditions).reason == "RollingOut"


def _starting(*names: str) -> list[ObservedAgent]:
    return [ObservedAgent(name, created_at=NOW, template_hash=NEW) for name in names]


@pytest.mark.parametrize(
    ("seconds", "status", "reason", "message"),
    [
        (0.0, "True", "RollingOut", "new pool: starting 2 agents, 0 ready"),
        (
            600.0,
            "False",
            "ProgressDeadlineExceeded",
            "new pool made no progress for 600s (progressDeadlineSeconds 600): 0 of 2 agents "
            "ready, agents not Ready: a, b",
        ),
    ],
)
def test_a_new_pool_is_starting_not_rolling_out(
    seconds: float, status: str, reason: str, message: str
) -> None:
    """A pool with no agent of an older template and never complete is a new pool: its
    Progressing message says it starts its agents, and past the deadline names those not
    Ready, never outdated agents it does not have."""
    policy = PoolPolicy(min_size=2, max_size=2, template_hash=NEW)
    agents = _starting("a", "b")
    mark = track_progress(None, policy, agents, NOW)
    view = compute_status(policy, agents, [], NOW + seconds, rollout=mark)
    progressing = _progressing(view.conditions)
    assert (progressing.status, progressing.reason, progressing.message) == (
        status,
        reason,
        message,
    )


def test_a_settled_pool_replacing_agents_is_no_new_pool_and_has_no_outdated_agents() -> None:
    """Once complete, a pool stays settled: an agent replaced later is not a new pool, and a
    stuck replacement names no outdated agents when there are none."""
    policy = PoolPolicy(min_size=1, max_size=1, template_hash=NEW, progress_deadline_seconds=60)
    ready = [ObservedAgent("a", created_at=NOW, ready=True, ready_at=NOW, template_hash=NEW)]
    mark = track_progress(None, policy, ready, NOW)
    assert mark.settled
    replaced = _starting("b")
    mark = track_progress(mark, policy, replaced, NOW + 1)
    assert mark.settled
    moving = _progressing(compute_status(policy, replaced, [], NOW + 1, rollout=mark).conditions)
    assert not moving.message.startswith("new pool"), moving
    stuck = _progressing(compute_status(policy, replaced, [], NOW + 61, rollout=mark).conditions)
    assert stuck.reason == "ProgressDeadlineExceeded"
    assert "new agents not Ready: b" in stuck.message
    assert "outdated" not in stuck.message


@pytest.mark.parametrize(
    ("stored", "settled"),
    [
        ([], False),
        ([{"type": "Progressing", "reason": "RollingOut", "message": "new pool: starting"}], False),
        (
            [{"type": "Progressing", "reason": "RolloutComplete", "message": "rollout complete"}],
            True,
        ),
        ([{"type": "Progressing", "reason": "RollingOut", "message": "rolling out: 1 of 2"}], True),
    ],
)
def test_a_restarted_operator_tells_a_new_pool_from_its_status(
    stored: list[dict[str, str]], settled: bool
) -> None:
    """After a restart, a pool whose status spoke of anything but a new pool's start is settled."""
    policy = PoolPolicy(min_size=2, max_size=2, template_hash=NEW)
    mark = restored_mark(stored, policy, _starting("a", "b"), NOW)  # type: ignore[arg-type]
    assert mark.settled is settled


@pytest.mark.parametrize("strategy", ["LIFO", "FIFO"])
def test_a_current_agent_is_handed_out_before_an_outdated_one(strategy: str) -> None:
    """Whatever the strategy would pick, a free agent on the current template goes first, so
    under a steady load the outdated agents fall idle and the rollout can retire them; an
    outdated agent still serves when no current one is free."""
    policy = PoolPolicy(min_size=3, max_size=3, template_hash=NEW, strategy=strategy)  # type: ignore[arg-type]
    old_first = ObservedAgent("a", ready=True, idle_since=1.0, template_hash=OLD)
    new = ObservedAgent("b", ready=True, idle_since=2.0, template_hash=NEW)
    old_last = ObservedAgent("c", ready=True, idle_since=3.0, template_hash=OLD)
    agents = [old_first, new, old_last]
    assert first_available(policy, handout_order(policy.strategy, agents)) == new
    assert available_agents(policy, agents)[0] == new
    assert first_available(policy, [old_first, old_last]) == old_first
