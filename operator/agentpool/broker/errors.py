"""Why a checkout did not get an agent: the pool stayed exhausted, or the pool went away.

Raised by `Broker.checkout`; the run engine records the message as the item's failure reason
and the lease controller as the lease's, so each message says what a user needs to act on.
"""

from __future__ import annotations


class BrokerError(Exception):
    """A checkout failed."""


class PoolExhausted(BrokerError):
    """No agent became free for a checkout within its timeout.

    The message names the pool, its size, how many agents are Ready and busy, and how many
    checkouts wait, so the user can tell a pool that is too small from one that cannot start.
    """

    def __init__(
        self,
        pool: str,
        *,
        timeout: float,
        agents: int,
        busy: int,
        ready: int,
        waiting: int,
        min_size: int,
        max_size: int,
    ) -> None:
        self.pool = pool
        self.timeout = timeout
        self.agents = agents
        self.busy = busy
        self.ready = ready
        self.waiting = waiting
        self.min_size = min_size
        self.max_size = max_size
        noun = "agent" if agents == 1 else "agents"
        super().__init__(
            f'pool "{pool}" exhausted after {timeout:g}s: {busy} of {agents} {noun} busy '
            f"(minSize {min_size}, maxSize {max_size}, ready {ready}), {waiting} waiting",
        )


class PoolClosed(BrokerError):
    """The pool was deleted (or its broker stopped) while the checkout waited or before it."""

    def __init__(self, pool: str, reason: str = "was deleted") -> None:
        self.pool = pool
        self.reason = reason
        super().__init__(f'pool "{pool}" {reason}: no agent will be handed out')
