"""Whether an agent's failures are its own: the quarantine judgement, relative to the pool.

An item can fail because its input is bad; then it fails on every agent, and retiring the agent
that happened to serve it only churns pods. So an agent is quarantined only when it fails where
the rest of the pool succeeds: it has failed `quarantineAfterFailures` items in a row, the other
agents served items successfully over the same recent window, and its failure rate there is well
above theirs. The broker keeps the window of outcomes and asks this on every failed checkin.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass

#: How many of the pool's latest outcomes (successes and failures of all agents) are compared.
WINDOW = 50
#: Above this failure rate the other agents fail too much for any one agent to stand out.
MAX_OTHERS_FAILURE_RATE = 0.5
#: An agent stands out when its failure rate is at least this many times the others'.
OUTLIER_FACTOR = 2.0


@dataclass(frozen=True, slots=True)
class Tally:
    """Items served and how many of them failed."""

    items: int = 0
    failures: int = 0

    @property
    def successes(self) -> int:
        return self.items - self.failures

    @property
    def failure_rate(self) -> float:
        return self.failures / self.items if self.items else 0.0


def split_tallies(agent: str, window: Iterable[tuple[str, bool]]) -> tuple[Tally, Tally]:
    """The agent's outcomes and everyone else's, from a window of (agent, failed) pairs."""
    mine = [0, 0]
    others = [0, 0]
    for name, failed in window:
        counts = mine if name == agent else others
        counts[0] += 1
        counts[1] += int(failed)
    return Tally(mine[0], mine[1]), Tally(others[0], others[1])


def should_quarantine(threshold: int, streak: int, *, agent: Tally, others: Tally) -> bool:
    """The agent has failed `streak` items in a row: is that the agent's fault?

    Never with `threshold` 0 (quarantine off) or a streak below it; never when the other agents
    served nothing successfully in the window (a pool of one, or items that fail everywhere:
    there is nothing to tell the agent from its items by); otherwise when the others mostly
    succeed and the agent fails at least `OUTLIER_FACTOR` times as often as they do.
    """
    if not threshold or streak < threshold:
        return False
    if others.successes == 0 or others.failure_rate > MAX_OTHERS_FAILURE_RATE:
        return False
    return agent.failure_rate >= OUTLIER_FACTOR * others.failure_rate


class CheckinWindow:
    """The pool's latest `WINDOW` outcomes, which the broker records on every checkin."""

    def __init__(self, size: int = WINDOW) -> None:
        self._outcomes: collections.deque[tuple[str, bool]] = collections.deque(maxlen=size)

    def record(self, agent: str, *, failed: bool) -> None:
        self._outcomes.append((agent, failed))

    def judge(self, agent: str, threshold: int, streak: int) -> bool:
        """Whether `agent`, failing `streak` items in a row, is to be quarantined now."""
        mine, others = split_tallies(agent, self._outcomes)
        return should_quarantine(threshold, streak, agent=mine, others=others)
