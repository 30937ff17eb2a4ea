"""Sizing advice from observed demand: what minSize and maxSize would have served it.

Demand is the agents that busy slots plus waiting checkouts fill, sampled by the AgentPool
reconciler on each visit and kept for a window. The recommendation is plain arithmetic over
those samples so a user can check it: maxSize covers the peak, minSize the median, so half the
time no checkout waits for a cold start and at the peak none waits for lack of room.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DemandSample:
    """Demand at one moment: slots busy and slots waited for, with ``slots`` per agent (a
    waiting item wants one slot, a waiting lease every slot of an agent)."""

    at: float
    busy: int
    waiting: int
    slots: int = 1

    @property
    def demand(self) -> int:
        """Agents that would have been in use had there been room for everyone: the busy and
        waited-for slots, ``slots`` to an agent."""
        return -(-(self.busy + self.waiting) // max(1, self.slots))


@dataclass(frozen=True, slots=True)
class SizingAdvice:
    """Suggested sizes, with the figures they come from."""

    min_size: int
    max_size: int
    peak_demand: int
    median_demand: int
    samples: int
    window_seconds: float


def recent_samples(
    history: Sequence[DemandSample],
    *,
    now: float,
    window: float,
) -> list[DemandSample]:
    """The samples no older than `window` seconds at `now`, oldest first."""
    return sorted(
        (sample for sample in history if now - window <= sample.at <= now),
        key=lambda sample: sample.at,
    )


def recommend(
    history: Sequence[DemandSample],
    *,
    now: float,
    window: float,
) -> SizingAdvice | None:
    """Recommend minSize (median demand) and maxSize (peak demand) over the last `window` s."""
    recent = recent_samples(history, now=now, window=window)
    if not recent:
        return None
    demands = sorted(sample.demand for sample in recent)
    # The upper median, so an even split between two levels recommends the higher.
    median = demands[math.floor(len(demands) / 2)]
    peak = demands[-1]
    return SizingAdvice(
        min_size=median,
        max_size=max(peak, median),
        peak_demand=peak,
        median_demand=median,
        samples=len(recent),
        window_seconds=window,
    )
