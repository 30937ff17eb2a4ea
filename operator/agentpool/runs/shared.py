"""What the parts of one run's engine share: one value, made once per run and handed to each.

The :class:`~agentpool.runs.engine.RunEngine` joins parts (the intake, the feed, the retries,
the lanes, the reporter) that all read the same clock, count in the same ledger, record through
the same recorder, note what the run waits for in the same place and wake the same loop. The
engine makes a :class:`RunShared` of those once, and each part's constructor takes it and only
what is its own besides. A part keeps its own references to what it uses, taken at
construction, so reading one costs an item no more than before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agentpool.runs.contracts import Clock, Waiting
from agentpool.runs.journaling import Recorder
from agentpool.runs.status import RunLedger


@dataclass(frozen=True, slots=True)
class RunShared:
    """The clock, the books and the signals of one run, as every part of its engine sees them."""

    clock: Clock
    """The run's clock: a test's fake clock moves every part at once."""
    ledger: RunLedger
    """The run's counts and records, from which its status is written."""
    records: Recorder
    """Where an item's start and verdict are recorded: the ledger and the journal in one step."""
    waiting: Waiting
    """Where a part notes what the run waits for (a pool, the source), for its Waiting
    condition."""
    wake: Callable[[], None]
    """Rings the engine's alarm, so its loop looks again: a lane is free, a retry or an item is
    ready."""
    changed: Callable[[], None]
    """Status has news: the next batched write carries it."""
