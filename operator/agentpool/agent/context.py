"""The ``Context`` of one item: what its handler is told beside the item and the run's input.

The server builds a ``Context`` for every item and hands it to the author's handler as its third
argument; authors import it from ``agentpool.agent`` to annotate their handlers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from agentpool.agent.binding import Binding


@dataclass(frozen=True, slots=True)
class Context:
    """What a handler knows about the item it is given, beyond the item and the run's input."""

    id: Any
    """The item's id, as the run names it."""
    attempt: int
    """1 for the first attempt at this item; raised on every retry or re-run after a crash."""
    run: str | None
    """The name of the PoolRun the item belongs to, if any."""
    uses: int
    """How many items this agent has been handed, this one included."""
    state: Any
    """What the start-up returned."""
    logger: logging.Logger
    """The agent's logger: stdout, one line per record; a record with a traceback
    (``logger.exception``) goes to stderr whole."""
    binding: Binding | None = None
    """The lease the agent is bound to (its name, context and expiry), or None when it serves
    its pool rather than one lease's holder."""
