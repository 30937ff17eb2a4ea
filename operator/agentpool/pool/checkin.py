"""How a checkout ends: the outcome an agent comes back with, or why no agent was handed out.

The broker hands agents out and takes them back; the run engine and the lease controller hold
them in between. Both sides speak of a checkout in these words, defined once here below both of
them: :class:`CheckinOutcome` says what becomes of a returned agent, and the errors say, in the
user's words, why a checkout got none (the run engine records the message as the item's failure,
the lease controller as the lease's).
"""

from __future__ import annotations

import enum


class CheckinOutcome(enum.StrEnum):
    """How a checkout ended, which decides what becomes of the agent."""

    SUCCESS = "success"
    """The item (or lease) finished: the agent returns to the idle set."""
    FAILURE = "failure"
    """The item failed on the agent: it returns, but counts toward quarantine."""
    LOST = "lost"
    """The call timed out or the agent crashed: its state is unknown, so it is retired."""
    RESET_FAILED = "reset_failed"
    """The agent's reset between items failed: it is retired."""
    UNUSED = "unused"
    """The holder gave the agent back without using it: no use counted, its failure streak and
    place in the idle order kept."""


class CheckoutFailed(Exception):
    """No agent could be checked out; the message says why in the user's words."""


class PoolNotFound(CheckoutFailed):
    """The pool does not exist (or is not served), so no checkout of it can succeed."""


def pool_not_found(namespace: str, pool: str, *, waited: float | None = None) -> PoolNotFound:
    """The one way a missing pool is told, to runs, leases and gateway callers alike."""
    message = f'AgentPool "{pool}" not found in namespace "{namespace}"'
    if waited is not None:
        message += f" (waited {waited:g}s for it)"
    return PoolNotFound(message)


class PoolClosed(PoolNotFound):
    """The pool was deleted (or its broker stopped) while the checkout waited or before it."""

    DELETED = "was deleted"
    """The reason of a pool that is gone, as against one no longer served here."""

    def __init__(self, pool: str, reason: str = DELETED) -> None:
        self.pool = pool
        self.reason = reason
        super().__init__(f'pool "{pool}" {reason}: no agent will be handed out')


class CheckoutTimedOut(CheckoutFailed):
    """No agent became free for a checkout within its timeout (at once, for a timeout of 0). A
    run's item fails as CheckoutTimeout, a lease as CheckoutTimeout or PoolFull, a gateway call
    answers 503 PoolExhausted, which ``agentpool.client.PoolExhausted`` raises to its user (with
    the client's other ways of getting no agent)."""


class TooManyWaiters(CheckoutFailed):
    """The pool's waiting line is at its bound (``spec.maxWaiters``): a checkout that would wait
    is refused at once rather than queued."""


def too_many_waiters(pool: str, *, waiting: int, bound: int) -> TooManyWaiters:
    """The error of a checkout refused a place in line: it names the pool, the line and its
    bound, and what to change."""
    return TooManyWaiters(
        f'pool "{pool}" has {waiting} checkouts waiting, its bound (maxWaiters {bound}): try '
        "again shortly, or raise the pool's maxSize or maxWaiters"
    )


def exhausted(
    pool: str,
    *,
    timeout: float,
    agents: int,
    busy: int,
    ready: int,
    waiting: int,
    min_size: int,
    max_size: int,
    busy_slots: int = 0,
    slots: int = 1,
) -> CheckoutTimedOut:
    """The error of a checkout that waited ``timeout`` in vain: it names the pool, its size, how
    many agents are Ready and busy (and, with several slots each, how many slots), and how many
    checkouts wait, so the user can tell a pool that is too small from one that cannot start."""
    noun = "agent" if agents == 1 else "agents"
    in_use = f", {busy_slots} of {agents * slots} slots busy" if slots > 1 else ""
    return CheckoutTimedOut(
        f'pool "{pool}" exhausted after {timeout:g}s: {busy} of {agents} {noun} busy{in_use} '
        f"(minSize {min_size}, maxSize {max_size}, ready {ready}), {waiting} waiting"
    )
