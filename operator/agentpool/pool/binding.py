"""How a lease binds its agent: until when it holds it, and what it says when none comes.

The lease daemon in :mod:`agentpool.handlers.leases` asks :func:`hold_of` whether the agent it
got is the one the lease was Bound to before an operator restart (and so keeps its times) or a
new binding, :func:`needs_pending_report` whether to write Pending before it waits, and
:func:`failure_reason` what a checkout that found no agent says. Pure: ``now`` is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentpool.api.reasons import Reason
from agentpool.pool.pods import epoch


@dataclass(frozen=True, slots=True)
class Hold:
    """How a lease holds its agent: whether it resumes a binding made before, and until when."""

    #: The lease was Bound to this very agent already (before an operator restart).
    resumed: bool
    #: When the lease expires, in seconds since the epoch.
    expires: float
    #: When it was bound, as its status says, when resumed.
    bound_time: str | None = None

    def needs_report(self, status: dict[str, Any]) -> bool:
        """The Bound status is still to be written: a new binding, or one written before by an
        operator that wrote no conditions."""
        return not self.resumed or not status.get("conditions")


def hold_of(status: dict[str, Any], agent: str, *, ttl_seconds: float, now: float) -> Hold:
    """The hold of ``agent`` by a lease whose status is ``status``: its earlier binding when it
    names this agent and an expiry, else a new one for ``ttl_seconds`` from ``now``."""
    expires = epoch(status.get("expireTime"))
    if status.get("phase") == "Bound" and status.get("agent") == agent and expires is not None:
        return Hold(resumed=True, expires=expires, bound_time=status.get("boundTime") or None)
    return Hold(resumed=False, expires=now + ttl_seconds)


def needs_pending_report(status: dict[str, Any]) -> bool:
    """The Pending status is still to be written before the lease waits for an agent."""
    return status.get("phase") != "Pending" or not status.get("conditions")


def failure_reason(*, waited: bool) -> str:
    """What a lease whose checkout found no agent says: it waited in vain, or the pool is full."""
    return str(Reason.CHECKOUT_TIMEOUT if waited else Reason.POOL_FULL)
