"""How a lease binds its agent: until when it holds it, and what it says when that goes wrong.

The lease task in :mod:`agentpool.handlers.leases` asks :func:`hold_of` whether the agent it
got is the one the lease was Bound to before an operator restart (and so keeps its times) or a
new binding, and its :class:`Term` until when the lease holds it as the holder renews it;
:func:`oversized_context` whether the lease's context may go to an agent at all,
:func:`bind_failure` what an agent's refusal of ``POST /bind`` means for the lease and the agent,
:func:`needs_pending_report` whether to write Pending before it waits, and
:func:`failure_reason` what a checkout that found no agent says. Pure: ``now`` is given.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Literal

from agentpool.api.conditions import format_time
from agentpool.api.leases import MAX_CONTEXT_BYTES, AgentLeaseStatus
from agentpool.api.reasons import Reason
from agentpool.pool.pods import epoch

#: What becomes of an agent whose bind failed: back untouched (it never took the binding), back
#: counted as a failure (its bind function raised; it stays unbound), or retired (its state is
#: unknown: no answer, or bound to another lease).
AgentFate = Literal["unused", "failure", "retire"]

#: The answers of an agent that does not serve ``POST /bind`` at all.
UNSUPPORTED_STATUSES = frozenset({404, 405, 501})


def moment(timestamp: str | None) -> float | None:
    """An RFC 3339 time in seconds since the epoch; None for none, or one that does not parse."""
    try:
        return epoch(timestamp)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Term:
    """Until when a lease holds its agent: ``ttl_seconds`` after the later of its bound time
    and its last renewal, as a ``coordination.k8s.io`` Lease is held."""

    #: When the lease was bound, in seconds since the epoch.
    bound: float
    ttl_seconds: float
    #: ``spec.renewTime`` as last taken in, as the holder wrote it.
    renew_time: str | None = None
    #: When that renewal counts from.
    renewed: float | None = None

    @property
    def expires(self) -> float:
        start = self.bound if self.renewed is None else max(self.bound, self.renewed)
        return start + self.ttl_seconds

    def renew(self, renew_time: str | None, *, seen: float) -> Term:
        """The term once the holder's ``spec.renewTime`` reads ``renew_time``, as seen at
        ``seen``. A renewal dated after ``seen`` (the holder's clock runs ahead) counts from
        ``seen``, so no holder can keep an agent past ttlSeconds from now; the same value seen
        again changes nothing."""
        if renew_time == self.renew_time:
            return self
        renewed = moment(renew_time)
        return dataclasses.replace(
            self, renew_time=renew_time, renewed=None if renewed is None else min(renewed, seen)
        )


@dataclass(frozen=True, slots=True)
class Hold:
    """How a lease holds its agent: whether it resumes a binding made before, and its term."""

    #: The lease was Bound to this very agent already, with its own token (before a restart).
    resumed: bool
    term: Term
    #: When it was bound and until when the agent was told it is, as its status says, when
    #: resumed.
    bound_time: str | None = None
    expire_time: str | None = None

    def needs_report(self, status: AgentLeaseStatus) -> bool:
        """The Bound status is still to be written: a new binding, or one written before by an
        operator that wrote no conditions."""
        return not self.resumed or not status.conditions


def hold_of(
    status: AgentLeaseStatus,
    agent: str,
    *,
    secret: str,
    ttl_seconds: float,
    renew_time: str | None,
    now: float,
) -> Hold:
    """The hold of ``agent`` by a lease whose status is ``status`` and whose token Secret is
    ``secret``: its earlier binding when the status names this agent, that Secret and a time,
    else a new one bound ``now``; either renewed by ``renew_time``. A lease Bound by an operator
    that handed out no lease token (its status names another Secret) is bound anew."""
    bound_time, expire_time = status.bound_time, status.expire_time
    bound = None if bound_time is None else bound_time.timestamp()
    if bound is None and expire_time is not None:
        bound = expire_time.timestamp() - ttl_seconds
    resumed = (
        status.phase == "Bound"
        and status.agent == agent
        and status.token_secret_ref is not None
        and status.token_secret_ref.name == secret
        and bound is not None
    )
    if not resumed or bound is None:
        return Hold(resumed=False, term=Term(now, ttl_seconds).renew(renew_time, seen=now))
    return Hold(
        resumed=True,
        term=Term(bound, ttl_seconds).renew(renew_time, seen=now),
        bound_time=None if bound_time is None else format_time(bound_time),
        expire_time=None if expire_time is None else format_time(expire_time),
    )


def context_size(context: Any) -> int:
    """The size of a lease's context as compact JSON, in bytes."""
    return len(json.dumps(context, separators=(",", ":"), ensure_ascii=False).encode())


def oversized_context(context: Any) -> str | None:
    """Why a lease's context cannot go to an agent (it is over the limit), or None if it can."""
    size = context_size(context)
    if size <= MAX_CONTEXT_BYTES:
        return None
    return (
        f"spec.context is {size} bytes as compact JSON, over the limit of {MAX_CONTEXT_BYTES}:"
        " pass the agent a reference to the data (a ConfigMap's name, a URL) instead"
    )


@dataclass(frozen=True, slots=True)
class BindFailure:
    """What a failed ``POST /bind`` means: the lease fails with ``reason`` and ``message``, and
    the agent goes as ``fate`` says."""

    reason: str
    message: str
    fate: AgentFate


def bind_failure(
    status_code: int | None, reason: str, message: str, *, agent: str, pool: str
) -> BindFailure:
    """What the answer ``status_code`` (None: no answer came) with the agent's ``reason`` and
    ``message`` means for a lease binding ``agent`` of ``pool``."""
    which = f"agent {agent} of pool {pool}"
    if status_code in UNSUPPORTED_STATUSES:
        return BindFailure(
            str(Reason.BIND_UNSUPPORTED),
            f"{which} does not serve POST /bind (HTTP {status_code}), so it cannot take this"
            " lease's own token, and the pool's token is never handed out instead: run the"
            " pool's agents on an agent SDK that serves /bind",
            "unused",
        )
    if status_code is None:
        return BindFailure(
            str(Reason.BIND_FAILED), f"{which} gave no answer to POST /bind: {message}", "retire"
        )
    if status_code == 409:
        text = f"{which} is bound to another lease ({reason}): it is retired; create a new lease"
        return BindFailure(str(Reason.BIND_FAILED), text, "retire")
    return BindFailure(
        str(Reason.BIND_FAILED),
        f"{which} refused POST /bind with HTTP {status_code} ({reason or 'no reason'}): {message}",
        "failure",
    )


def rebind_failure(*, agent: str, pool: str) -> BindFailure:
    """Why a lease fails when ``agent`` of ``pool``, bound with a fresh token while the lease's
    Secret held another, could not be unbound to take the Secret's: it may hold either token,
    so it is retired."""
    return BindFailure(
        str(Reason.BIND_FAILED),
        f"agent {agent} of pool {pool} refused POST /unbind, needed to bind it again with the"
        " token in the lease's Secret: it is retired; create a new lease",
        "retire",
    )


def needs_pending_report(status: AgentLeaseStatus) -> bool:
    """The Pending status is still to be written before the lease waits for an agent."""
    return status.phase != "Pending" or not status.conditions


def failure_reason(*, waited: bool) -> str:
    """What a lease whose checkout found no agent says: it waited in vain, or the pool is full."""
    return str(Reason.CHECKOUT_TIMEOUT if waited else Reason.POOL_FULL)
