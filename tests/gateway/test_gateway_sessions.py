"""The gateway's table of sessions: a session holds what its first answer kept until it ends,
an id in use is never taken over, and only a session with no request in flight that has gone
its idle timeout without one is ended by the clock."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentpool.gateway.sessions import SessionTable

KEY = ("ns", "notes", "s-1")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def table() -> tuple[SessionTable[str], Clock]:
    clock = Clock()
    return SessionTable(clock), clock


def test_a_session_holds_its_agent_until_it_ends() -> None:
    sessions, _ = table()
    assert sessions.use(KEY) is None
    assert sessions.begin(KEY, "agent-a", idle_timeout=10)
    assert not sessions.begin(KEY, "agent-b", idle_timeout=10)  # the id stays with its agent
    assert sessions.use(KEY) == "agent-a"
    sessions.used(KEY)
    assert sessions.end(KEY) == ("agent-a", True)
    assert sessions.use(KEY) is None
    assert sessions.end(KEY) is None
    assert len(sessions) == 0


def test_a_session_ended_with_requests_in_flight_gives_back_its_agent_after_the_last() -> None:
    """A DELETE while two other requests of the session still run: no new request finds the
    session, and its agent is free only once both are over, never taking more than its slots."""
    sessions, _ = table()
    sessions.begin(KEY, "agent-a", idle_timeout=10)
    sessions.use(KEY)
    sessions.use(KEY)
    assert sessions.end(KEY) == ("agent-a", False)
    assert sessions.use(KEY) is None  # ended for every new request
    assert not sessions.begin(KEY, "agent-b", idle_timeout=10)  # nor taken over while ending
    assert sessions.used(KEY) is None
    assert sessions.used(KEY) == "agent-a"
    assert sessions.used(KEY) is None
    assert sessions.begin(KEY, "agent-b", idle_timeout=10)


def test_only_a_session_idle_past_its_timeout_ends() -> None:
    sessions, clock = table()
    sessions.begin(KEY, "agent-a", idle_timeout=10)
    sessions.begin(("ns", "notes", "s-2"), "agent-b", idle_timeout=30)
    clock.advance(9)
    assert sessions.idle() == []
    sessions.use(KEY)  # a request in flight: never idle, however long it takes
    clock.advance(100)
    assert sessions.idle() == [(("ns", "notes", "s-2"), "agent-b")]
    sessions.used(KEY)  # its idle time starts when its last request ends
    clock.advance(9)
    assert sessions.idle() == []
    clock.advance(1)
    assert sessions.idle() == [(KEY, "agent-a")]
    assert len(sessions) == 0


@given(
    st.lists(
        st.tuples(st.sampled_from(["begin", "use", "used", "end", "tick"]), st.integers(0, 3)),
        max_size=60,
    )
)
def test_no_sequence_of_requests_loses_or_doubles_what_a_session_holds(
    steps: list[tuple[str, int]],
) -> None:
    """Whatever the order, each held agent comes back exactly once: from end or idle."""
    sessions, clock = table()
    held: dict[str, str] = {}
    back: list[str] = []
    for n, (step, which) in enumerate(steps):
        key = ("ns", "p", str(which))
        if step == "begin":
            agent = f"agent-{n}"
            if sessions.begin(key, agent, idle_timeout=5):
                held[agent] = agent
        elif step == "use":
            sessions.use(key)
        elif step == "used":
            if (freed := sessions.used(key)) is not None:
                back.append(freed)
        elif step == "end":
            if (ended := sessions.end(key)) is not None and ended[1]:
                back.append(ended[0])
        else:
            clock.advance(3)
            back += [agent for _, agent in sessions.idle()]
    for i in range(4):
        key = ("ns", "p", str(i))
        if (ended := sessions.end(key)) is not None and ended[1]:
            back.append(ended[0])
        for _ in steps:  # every request still in flight ends
            if (freed := sessions.used(key)) is not None:
                back.append(freed)
    assert sorted(back) == sorted(held)
