"""The scaling plan, rule by rule, with a fake clock: `now` is a number the test chooses."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from agentpool.pool import ObservedAgent, PoolPolicy, Waiter, plan

NOW = 1000.0


def idle(name: str, *, idle_for: float = 0.0, **fields: object) -> ObservedAgent:
    """A Ready agent that has been idle for `idle_for` seconds at NOW."""
    return ObservedAgent(
        name=name,
        created_at=fields.pop("created_at", 0.0),  # type: ignore[arg-type]
        ready=True,
        ready_at=1.0,
        idle_since=NOW - idle_for,
        **fields,  # type: ignore[arg-type]
    )


def busy(name: str, **fields: object) -> ObservedAgent:
    """A Ready agent holding work."""
    return ObservedAgent(name=name, ready=True, ready_at=1.0, busy=True, **fields)  # type: ignore[arg-type]


def pending(name: str, **fields: object) -> ObservedAgent:
    """A pod not Ready yet."""
    return ObservedAgent(name=name, created_at=NOW - 1.0, **fields)  # type: ignore[arg-type]


def waiters(count: int) -> tuple[Waiter, ...]:
    return tuple(Waiter(priority=0, seq=i) for i in range(count))


@dataclass(frozen=True)
class Case:
    id: str
    policy: PoolPolicy
    agents: tuple[ObservedAgent, ...]
    create: int
    retire: tuple[tuple[str, str], ...] = ()
    waiting: int = 0
    held: tuple[str, ...] = field(default=())


CASES = [
    Case("empty pool fills to minSize", PoolPolicy(min_size=3, max_size=3), (), create=3),
    Case(
        "pending pods count toward minSize",
        PoolPolicy(min_size=2, max_size=2),
        (pending("p1"), pending("p2")),
        create=0,
    ),
    Case(
        "minIdle keeps idle agents on top of busy ones",
        PoolPolicy(min_size=1, max_size=5, min_idle=2),
        (busy("b1"), busy("b2")),
        create=2,
    ),
    Case(
        "minIdle counts existing idle and pending agents",
        PoolPolicy(min_size=1, max_size=5, min_idle=2),
        (busy("b1"), idle("i1"), pending("p1")),
        create=0,
    ),
    Case(
        "minIdle never passes maxSize",
        PoolPolicy(min_size=1, max_size=3, min_idle=2),
        (busy("b1"), busy("b2")),
        create=1,
    ),
    Case(
        "one overflow pod per waiter not covered by a pending pod",
        PoolPolicy(min_size=1, max_size=6),
        (busy("b1"), pending("p1")),
        waiting=3,
        create=2,
    ),
    Case(
        "overflow never passes maxSize however many wait",
        PoolPolicy(min_size=1, max_size=2),
        (busy("b1"),),
        waiting=5,
        create=1,
    ),
    Case(
        "a full pool creates nothing for its waiters",
        PoolPolicy(min_size=2, max_size=2),
        (busy("b1"), busy("b2")),
        waiting=4,
        create=0,
    ),
    Case(
        "unschedulable pods are held, not replaced or deleted",
        PoolPolicy(min_size=2, max_size=4),
        (pending("p1", unschedulable=True), pending("p2", unschedulable=True)),
        waiting=2,
        create=0,
        held=("p1", "p2"),
    ),
    Case(
        "pods failing to pull their image are held, not churned",
        PoolPolicy(min_size=1, max_size=1),
        (pending("p1", waiting_reason="ImagePullBackOff"),),
        create=0,
        held=("p1",),
    ),
    Case(
        "idle overflow past idleTimeoutSeconds goes, longest idle first",
        PoolPolicy(min_size=1, max_size=4, idle_timeout_seconds=60),
        (idle("a", idle_for=100), idle("b", idle_for=70), idle("c", idle_for=10)),
        create=0,
        retire=(("a", "IdleTimeout"), ("b", "IdleTimeout")),
    ),
    Case(
        "idle timeout never goes below minSize",
        PoolPolicy(min_size=2, max_size=4, idle_timeout_seconds=60),
        (idle("a", idle_for=100), idle("b", idle_for=90), idle("c", idle_for=80)),
        create=0,
        retire=(("a", "IdleTimeout"),),
    ),
    Case(
        "idle overflow within its timeout stays",
        PoolPolicy(min_size=1, max_size=4, idle_timeout_seconds=60),
        (idle("a", idle_for=59), idle("b", idle_for=30)),
        create=0,
    ),
    Case(
        "idle overflow stays while waiters would take it",
        PoolPolicy(min_size=1, max_size=4, idle_timeout_seconds=60),
        (idle("a", idle_for=100), idle("b", idle_for=100)),
        waiting=2,
        create=0,
    ),
    Case(
        "minIdle keeps timed-out idle agents",
        PoolPolicy(min_size=0, max_size=4, min_idle=1, idle_timeout_seconds=60),
        (busy("b1"), idle("a", idle_for=100), idle("c", idle_for=200)),
        create=0,
        retire=(("c", "IdleTimeout"),),
    ),
    Case(
        "maxUses retires an idle agent and replaces it",
        PoolPolicy(min_size=2, max_size=2, max_uses=3),
        (idle("a", uses=3), idle("b", uses=2)),
        create=1,
        retire=(("a", "MaxUses"),),
    ),
    Case(
        "maxUses never retires a busy agent",
        PoolPolicy(min_size=1, max_size=1, max_uses=3),
        (busy("a", uses=9),),
        create=0,
    ),
    Case(
        "maxLifetimeSeconds retires an old idle agent and replaces it",
        PoolPolicy(min_size=1, max_size=1, max_lifetime_seconds=500),
        (idle("a", created_at=NOW - 500),),
        create=1,
        retire=(("a", "MaxLifetime"),),
    ),
    Case(
        "maxLifetimeSeconds never retires a busy agent",
        PoolPolicy(min_size=1, max_size=1, max_lifetime_seconds=500),
        (busy("a", created_at=0.0),),
        create=0,
    ),
    Case(
        "an agent the broker quarantined is retired",
        PoolPolicy(min_size=1, max_size=1, quarantine_after_failures=3),
        (idle("a", consecutive_failures=3, quarantined=True),),
        create=1,
        retire=(("a", "Quarantined"),),
    ),
    Case(
        "failures in a row alone keep the agent: items can fail everywhere",
        PoolPolicy(min_size=1, max_size=1, quarantine_after_failures=3),
        (idle("a", consecutive_failures=9),),
        create=0,
    ),
    Case(
        "quarantine 0 never quarantines",
        PoolPolicy(min_size=1, max_size=1, quarantine_after_failures=0),
        (idle("a", consecutive_failures=50, quarantined=True),),
        create=0,
    ),
    Case(
        "a template change starts a new agent first (maxSurge 25% of 2 is 1, maxUnavailable 0)",
        PoolPolicy(min_size=2, max_size=2, template_hash="new"),
        (idle("a", template_hash="old"), busy("b", template_hash="old")),
        create=1,
    ),
    Case(
        "once the new agent is Ready an idle outdated one goes, never the busy one",
        PoolPolicy(min_size=2, max_size=2, template_hash="new"),
        (
            idle("a", template_hash="old"),
            busy("b", template_hash="old"),
            idle("c", template_hash="new"),
        ),
        create=1,
        retire=(("a", "Outdated"),),
    ),
    Case(
        "agents holding another token are replaced as they fall idle; unmarked ones stay",
        PoolPolicy(min_size=3, max_size=3, token_hash="new"),
        (idle("a", token_hash="old"), busy("b", token_hash="old"), idle("c")),
        create=1,
        retire=(("a", "TokenChanged"),),
    ),
    Case(
        "a failed pod is retired and replaced",
        PoolPolicy(min_size=2, max_size=2),
        (idle("a"), ObservedAgent("f", failed=True)),
        create=1,
        retire=(("f", "Failed"),),
    ),
    Case(
        "an idle agent that turns unready is retired and replaced",
        PoolPolicy(min_size=1, max_size=1),
        (ObservedAgent("u", ready=False, ready_at=5.0),),
        create=1,
        retire=(("u", "Unready"),),
    ),
    Case(
        "a busy agent that turns unready keeps its work",
        PoolPolicy(min_size=1, max_size=1),
        (ObservedAgent("u", ready=False, ready_at=5.0, busy=True),),
        create=0,
    ),
    Case(
        "an agent whose call timed out is retired and replaced",
        PoolPolicy(min_size=1, max_size=1),
        (idle("l", lost=True),),
        create=1,
        retire=(("l", "CallTimedOut"),),
    ),
    Case(
        "an agent whose reset failed is retired and replaced",
        PoolPolicy(min_size=1, max_size=1),
        (idle("r", reset_failed=True),),
        create=1,
        retire=(("r", "ResetFailed"),),
    ),
    Case(
        "pods being deleted do not count",
        PoolPolicy(min_size=2, max_size=2),
        (idle("a"), idle("d", deleting=True)),
        create=1,
    ),
    Case(
        "a lowered maxSize scales down at once: pending first, then longest idle",
        PoolPolicy(min_size=1, max_size=2, idle_timeout_seconds=600),
        (busy("b"), idle("i1", idle_for=5), idle("i2", idle_for=50), pending("p")),
        create=0,
        retire=(("p", "ScaledDown"), ("i2", "ScaledDown")),
    ),
    Case(
        "scale-down never touches busy agents",
        PoolPolicy(min_size=1, max_size=1),
        (busy("a"), busy("b"), busy("c")),
        create=0,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_plan(case: Case) -> None:
    """The plan creates and retires exactly what the rule says."""
    result = plan(case.policy, case.agents, waiters(case.waiting), NOW)
    assert result.create == case.create
    assert [(r.name, r.reason) for r in result.retire] == list(case.retire)
    assert result.held == case.held


def test_plan_is_empty_when_steady() -> None:
    """A pool at minSize with nothing wrong has nothing to do."""
    result = plan(PoolPolicy(min_size=2, max_size=2), (idle("a"), idle("b")), (), NOW)
    assert result.empty
    assert result.desired == 2


def test_idle_timeout_follows_the_clock() -> None:
    """The same idle overflow agent stays at t and goes once idleTimeoutSeconds have passed."""
    policy = PoolPolicy(min_size=0, max_size=1, idle_timeout_seconds=60)
    agent = ObservedAgent("a", ready=True, ready_at=0.0, idle_since=100.0)
    assert plan(policy, [agent], (), 159.9).retire == ()
    assert plan(policy, [agent], (), 160.0).retired_names == ("a",)
