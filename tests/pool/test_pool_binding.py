"""How a lease binds its agent and how a restarted operator takes held agents back: resuming
a binding, which leases hold which agent, when a wait gives up."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentpool.api.leases import MAX_CONTEXT_BYTES, AgentLeaseStatus
from agentpool.pool.binding import (
    Hold,
    Term,
    bind_failure,
    context_size,
    failure_reason,
    hold_of,
    needs_pending_report,
    oversized_context,
)
from agentpool.pool.restoring import IdleWatch, bound_lease_agents

NOW = 10_000.0
SECRET = "chat-lease-token"
BOUND = {
    "phase": "Bound",
    "agent": "a",
    "tokenSecretRef": {"name": SECRET, "key": "token"},
    "expireTime": "1970-01-01T03:00:00Z",
    "boundTime": "1970-01-01T02:00:00Z",
    "conditions": [{"type": "Bound", "status": "True"}],
}
#: 1970-01-01T02:00:00Z and 03:00:00Z in seconds since the epoch.
TWO, THREE = 7_200.0, 10_800.0


def stored(status: dict[str, Any]) -> AgentLeaseStatus:
    """The status as the lease handler reads it from the lease."""
    return AgentLeaseStatus.model_validate(status)


@pytest.mark.parametrize(
    ("status", "agent", "resumed", "bound"),
    [
        ({}, "a", False, NOW),
        (BOUND, "a", True, TWO),
        # Another agent than the one the lease was Bound to: a new binding.
        (BOUND, "b", False, NOW),
        ({**BOUND, "expireTime": None, "boundTime": None}, "a", False, NOW),
        # Bound by an operator that wrote no boundTime: bound a ttl before it expires.
        ({**BOUND, "boundTime": None}, "a", True, THREE - 60),
        ({**BOUND, "phase": "Pending"}, "a", False, NOW),
        # Bound by an operator that gave the client the pool's token: bound anew, with its own.
        ({**BOUND, "tokenSecretRef": {"name": "p-agent-token", "key": "token"}}, "a", False, NOW),
        ({**BOUND, "tokenSecretRef": None}, "a", False, NOW),
    ],
)
def test_a_lease_resumes_its_binding_or_starts_a_new_one(
    status: dict[str, Any], agent: str, resumed: bool, bound: float
) -> None:
    """After a restart the lease keeps its times; otherwise its ttl runs from now."""
    hold = hold_of(stored(status), agent, secret=SECRET, ttl_seconds=60, renew_time=None, now=NOW)
    assert (hold.resumed, hold.term.bound, hold.term.expires) == (resumed, bound, bound + 60)
    if resumed:
        assert (hold.bound_time, hold.expire_time) == (status["boundTime"], status["expireTime"])


def test_a_renewal_made_while_the_operator_was_away_counts() -> None:
    """A lease renewed before a restart holds its agent ttl after that renewal."""
    hold = hold_of(
        stored(BOUND),
        "a",
        secret=SECRET,
        ttl_seconds=60,
        renew_time="1970-01-01T02:30:00Z",
        now=NOW,
    )
    assert (hold.resumed, hold.term.expires) == (True, TWO + 1_800 + 60)


@pytest.mark.parametrize(
    ("renewals", "expires"),
    [
        # (renewTime, seen) in turn; bound at 100 with a ttl of 30.
        ([], 130.0),
        ([("1970-01-01T00:02:00Z", 121.0)], 150.0),
        # Microseconds, as a MicroTime carries them.
        ([("1970-01-01T00:02:00.500000Z", 121.0)], 150.5),
        # Renewed before it was bound (a renewTime set at creation): the bound time wins.
        ([("1970-01-01T00:01:00Z", 101.0)], 130.0),
        # The holder's clock runs ahead: the renewal counts from when it was seen.
        ([("1970-01-01T01:00:00Z", 110.0)], 140.0),
        # Seen again later, the same value moves nothing.
        ([("1970-01-01T01:00:00Z", 110.0), ("1970-01-01T01:00:00Z", 125.0)], 140.0),
        ([("1970-01-01T00:02:00Z", 121.0), ("1970-01-01T00:02:20Z", 141.0)], 170.0),
        # A renewTime that is not a time renews nothing.
        ([("yesterday", 121.0)], 130.0),
    ],
)
def test_a_lease_expires_a_ttl_after_it_was_bound_or_last_renewed(
    renewals: list[tuple[str, float]], expires: float
) -> None:
    """ttlSeconds after the later of the bound time and the renewal, and never later than ttl
    after the moment the operator saw the renewal."""
    term = Term(bound=100.0, ttl_seconds=30)
    for renew_time, seen in renewals:
        term = term.renew(renew_time, seen=seen)
    assert term.expires == expires


@given(
    renew_time=st.one_of(
        st.text(max_size=40),
        st.datetimes().map(lambda moment: moment.isoformat() + "Z"),
    ),
    seen=st.floats(min_value=0, max_value=4e9),
)
def test_no_renewal_holds_an_agent_past_a_ttl_from_when_it_was_seen(
    renew_time: str, seen: float
) -> None:
    """Whatever the holder writes in renewTime (a time, far ahead, or not a time at all), the
    lease ends no earlier than a ttl after it was bound and no later than a ttl after the
    renewal was seen."""
    term = Term(bound=1_000.0, ttl_seconds=30).renew(renew_time, seen=seen)
    assert 1_030.0 <= term.expires <= max(1_000.0, seen) + 30


@pytest.mark.parametrize(
    ("status_code", "reason", "fate", "words"),
    [
        (404, "BindUnsupported", "unused", ["does not serve POST /bind", "HTTP 404"]),
        (405, "BindUnsupported", "unused", ["HTTP 405", "pool's token is never handed out"]),
        (501, "BindUnsupported", "unused", ["HTTP 501"]),
        (None, "BindFailed", "retire", ["gave no answer", "connection refused"]),
        (409, "BindFailed", "retire", ["bound to another lease", "AlreadyBound"]),
        (500, "BindFailed", "failure", ["HTTP 500", "BindFailed", "connection refused"]),
        (401, "BindFailed", "failure", ["HTTP 401"]),
    ],
)
def test_a_refused_bind_says_why_and_what_becomes_of_the_agent(
    status_code: int | None, reason: str, fate: str, words: list[str]
) -> None:
    """An agent without /bind fails the lease as BindUnsupported and goes back untouched; one
    whose state is unknown is retired; every message names the agent and its pool."""
    agent_reason = {409: "AlreadyBound", 500: "BindFailed"}.get(status_code or 0, "")
    failure = bind_failure(
        status_code, agent_reason, "connection refused", agent="p-x7k2q", pool="p"
    )
    assert (failure.reason, failure.fate) == (reason, fate)
    for word in ["agent p-x7k2q of pool p", *words]:
        assert word in failure.message


@pytest.mark.parametrize(
    ("context", "fits"),
    [
        (None, True),
        ({"session": "s-1", "user": {"id": 7}}, True),
        ("x" * (MAX_CONTEXT_BYTES - 2), True),
        ("x" * (MAX_CONTEXT_BYTES - 1), False),
        # Counted in bytes of UTF-8, not in characters.
        ("é" * (MAX_CONTEXT_BYTES // 2), False),
        (list(range(20_000)), False),
    ],
)
def test_a_context_over_the_limit_cannot_go_to_an_agent(context: Any, fits: bool) -> None:
    """At most MAX_CONTEXT_BYTES as compact JSON; the message gives the size and the limit."""
    problem = oversized_context(context)
    assert (problem is None) is fits
    if problem is not None:
        assert str(context_size(context)) in problem
        assert str(MAX_CONTEXT_BYTES) in problem


@pytest.mark.parametrize(
    ("hold", "status", "report"),
    [
        (Hold(resumed=False, term=Term(NOW, 60)), BOUND, True),
        (Hold(resumed=True, term=Term(NOW, 60)), BOUND, False),
        (Hold(resumed=True, term=Term(NOW, 60)), {**BOUND, "conditions": []}, True),
    ],
)
def test_bound_is_written_unless_already_there(
    hold: Hold, status: dict[str, Any], report: bool
) -> None:
    """A resumed binding written with conditions is not written again."""
    assert hold.needs_report(stored(status)) is report


@pytest.mark.parametrize(
    ("status", "report"),
    [
        ({}, True),
        ({"phase": "Pending"}, True),
        ({"phase": "Pending", "conditions": [{"type": "Bound", "status": "False"}]}, False),
    ],
)
def test_pending_is_written_unless_already_there(status: dict[str, Any], report: bool) -> None:
    """A lease already Pending, with its conditions, is not written again before it waits."""
    assert needs_pending_report(stored(status)) is report


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
