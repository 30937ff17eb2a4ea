"""How a lease binds its agent and how a restarted operator takes held agents back: resuming
a binding, which leases hold which agent, when a wait gives up."""

from __future__ import annotations

from typing import Any

import pytest

from agentpool.pool.binding import (
    Hold,
    failure_reason,
    hold_of,
    needs_pending_report,
)
from agentpool.pool.restoring import IdleWatch, bound_lease_agents

NOW = 10_000.0
BOUND = {
    "phase": "Bound",
    "agent": "a",
    "expireTime": "1970-01-01T03:00:00Z",
    "boundTime": "1970-01-01T02:00:00Z",
    "conditions": [{"type": "Bound"}],
}


@pytest.mark.parametrize(
    ("status", "agent", "hold"),
    [
        ({}, "a", Hold(resumed=False, expires=NOW + 60)),
        (BOUND, "a", Hold(resumed=True, expires=10_800.0, bound_time="1970-01-01T02:00:00Z")),
        # Another agent than the one the lease was Bound to: a new binding.
        (BOUND, "b", Hold(resumed=False, expires=NOW + 60)),
        ({**BOUND, "expireTime": None}, "a", Hold(resumed=False, expires=NOW + 60)),
        ({**BOUND, "phase": "Pending"}, "a", Hold(resumed=False, expires=NOW + 60)),
    ],
)
def test_a_lease_resumes_its_binding_or_starts_a_new_one(
    status: dict[str, Any], agent: str, hold: Hold
) -> None:
    """After a restart the lease keeps its times; otherwise its ttl runs from now."""
    assert hold_of(status, agent, ttl_seconds=60, now=NOW) == hold


@pytest.mark.parametrize(
    ("hold", "status", "report"),
    [
        (Hold(resumed=False, expires=NOW), BOUND, True),
        (Hold(resumed=True, expires=NOW), BOUND, False),
        (Hold(resumed=True, expires=NOW), {**BOUND, "conditions": []}, True),
    ],
)
def test_bound_is_written_unless_already_there(
    hold: Hold, status: dict[str, Any], report: bool
) -> None:
    """A resumed binding written with conditions is not written again."""
    assert hold.needs_report(status) is report


@pytest.mark.parametrize(
    ("status", "report"),
    [({}, True), ({"phase": "Pending"}, True), ({"phase": "Pending", "conditions": [{}]}, False)],
)
def test_pending_is_written_unless_already_there(status: dict[str, Any], report: bool) -> None:
    """A lease already Pending, with its conditions, is not written again before it waits."""
    assert needs_pending_report(status) is report


def test_a_checkout_without_agent_says_why() -> None:
    """A lease that waited timed out; one that would not wait found the pool full."""
    assert (failure_reason(waited=True), failure_reason(waited=False)) == (
        "CheckoutTimeout",
        "PoolFull",
    )


def _lease(name: str, pool: str, phase: str, agent: str | None) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"poolRef": {"name": pool}},
        "status": {"phase": phase, "agent": agent},
    }


def test_only_bound_leases_of_the_pool_hold_agents() -> None:
    """A restarted pool takes back the agents of its own Bound leases, and only those."""
    leases = [
        _lease("mine", "p", "Bound", "a"),
        _lease("other-pool", "q", "Bound", "b"),
        _lease("pending", "p", "Pending", None),
        _lease("released", "p", "Released", "c"),
        _lease("no-agent", "p", "Bound", None),
        {"metadata": {"name": "bare"}},
    ]
    assert bound_lease_agents(leases, "p") == [("mine", "a")]


@pytest.mark.parametrize(
    ("answers", "gives_up_at"),
    [
        # Answers (busy) keep it waiting however long; silence past 30 s ends it.
        ([True, True, True], None),
        ([False, False], None),
        ([False, False, False], 2),
        ([False, True, False, False], None),
        ([False, True, False, False, False], 4),
    ],
)
def test_a_silent_agent_is_given_up(answers: list[bool], gives_up_at: int | None) -> None:
    """The silence counts from the first unanswered poll and any answer resets it."""
    watch: IdleWatch | None = IdleWatch(silence_seconds=30.0)
    given_up = None
    for step, answered in enumerate(answers):
        assert watch is not None
        watch = watch.heard(answered=answered, now=NOW + 20.0 * step)
        if watch is None:
            given_up = step
            break
    assert given_up == gives_up_at


def test_a_deadline_ends_the_wait() -> None:
    """With a deadline the wait is open until then, answered or not."""
    watch = IdleWatch(deadline=NOW)
    assert watch.open(NOW - 1)
    assert not watch.open(NOW)
    assert IdleWatch().open(NOW * 10)
    assert watch.heard(answered=False, now=NOW) is not None
