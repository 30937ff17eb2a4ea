"""The quarantine judgement and the replacement back-off, as tables.

Proves that an agent is quarantined only when it fails where the rest of the pool succeeds, that
repeated retirements are summarised in one Event message, and that back-off doubles, caps and
resets after a healthy period as CrashLoopBackOff does.
"""

from __future__ import annotations

import pytest

from agentpool.pool.backoff import Backoff, retry_delay
from agentpool.pool.quarantine import Tally, should_quarantine, split_tallies
from agentpool.pool.recycling import summarise_retirements


@pytest.mark.parametrize(
    ("why", "threshold", "streak", "agent", "others", "expected"),
    [
        ("broken among healthy", 3, 3, Tally(3, 3), Tally(10, 0), True),
        ("streak short of the limit", 3, 2, Tally(2, 2), Tally(10, 0), False),
        ("quarantine off", 0, 9, Tally(9, 9), Tally(10, 0), False),
        ("items fail everywhere", 3, 5, Tally(5, 5), Tally(10, 10), False),
        ("a pool of one: no one to compare with", 3, 5, Tally(5, 5), Tally(), False),
        ("others fail half the time", 3, 3, Tally(4, 3), Tally(10, 5), False),
        ("others fail rarely, the agent often", 2, 2, Tally(5, 3), Tally(20, 2), True),
        ("the agent no worse than twice the others", 2, 2, Tally(10, 3), Tally(10, 2), False),
    ],
)
def test_should_quarantine(
    why: str, threshold: int, streak: int, agent: Tally, others: Tally, expected: bool
) -> None:
    """Only an agent that fails where others succeed is quarantined."""
    assert should_quarantine(threshold, streak, agent=agent, others=others) is expected, why


def test_split_outcomes_counts_the_agent_apart_from_the_rest() -> None:
    """The window is split into the agent's outcomes and everyone else's."""
    window = [("a", True), ("b", False), ("a", True), ("c", True), ("b", False)]
    assert split_tallies("a", window) == (Tally(2, 2), Tally(3, 1))


@pytest.mark.parametrize(
    ("retired", "message"),
    [
        ((("a", "Quarantined"),), "Retired agent a: Quarantined"),
        (
            (("a", "MaxUses"), ("b", "MaxUses"), ("c", "Quarantined")),
            "Retired 3 agents: a, b (MaxUses); c (Quarantined)",
        ),
    ],
)
def test_retirements_are_summarised_in_one_message(
    retired: tuple[tuple[str, str], ...], message: str
) -> None:
    """A pass that retires several agents posts one Event naming them all, grouped by reason."""
    assert summarise_retirements(retired) == message


@pytest.mark.parametrize(
    ("attempt", "delay"), [(0, 0.0), (1, 1.0), (2, 2.0), (3, 4.0), (7, 60.0), (500, 60.0)]
)
def test_retry_delay_doubles_up_to_the_cap(attempt: int, delay: float) -> None:
    """Each failure doubles the wait, never past the cap."""
    assert retry_delay(attempt, base=1.0, cap=60.0) == delay


def test_backoff_doubles_and_resets_after_a_healthy_period() -> None:
    """Failures in quick succession wait 1, 2, 4 s; after reset_after_seconds without one the
    wait starts from the base again."""
    backoff = Backoff(base_seconds=1.0, max_seconds=60.0, reset_after_seconds=600.0)
    assert backoff.hold(0.0) == 0.0
    holds = []
    now = 0.0
    for _ in range(3):
        backoff = backoff.failed(now)
        holds.append(backoff.hold(now))
        now += 5.0
    assert holds == [1.0, 2.0, 4.0]
    assert backoff.hold(now) == 0.0
    backoff = backoff.failed(now + 600.0)
    assert (backoff.failures, backoff.hold(now + 600.0)) == (1, 1.0)
