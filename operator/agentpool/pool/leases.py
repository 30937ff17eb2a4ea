"""What an AgentLease's status says at each step of its life, as data.

The lease handlers in :mod:`agentpool.handlers.leases` decide when a lease waits, binds, expires,
fails or is released; the functions here give the status to write then, as an
:class:`~agentpool.api.leases.AgentLeaseStatus` of the fields to change, written as a JSON merge
patch (a field given as ``None`` is cleared). While a lease is Bound its status says where to
reach its agent; once it ends, nothing a client could still use to reach the agent is left in
it. Its conditions follow the phase, so ``kubectl wait --for=condition=Bound`` (or ``Expired``,
``Failed``) works: the condition named by the phase is True, the others False, and each carries
the phase's reason and message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import ValidationError

from agentpool.api.base import KeyRef
from agentpool.api.conditions import ConditionView, merge_conditions
from agentpool.api.leases import AgentLeaseStatus, LeasePhase
from agentpool.api.raw import RawCondition
from agentpool.api.reasons import ConditionType, Reason

#: The lease's phase that makes each of its conditions True.
CONDITION_PHASES: dict[str, LeasePhase] = {
    str(ConditionType.BOUND): "Bound",
    str(ConditionType.EXPIRED): "Expired",
    str(ConditionType.FAILED): "Failed",
}

EndPhase = Literal["Released", "Expired", "Failed"]


def stored_status(raw: Mapping[str, Any] | None) -> AgentLeaseStatus:
    """The lease's status as stored, read once into the model. One the model refuses (written
    by hand past an older schema) keeps only its phase, so an ended lease stays ended and a
    live one is served as a new one."""
    raw = raw or {}
    try:
        return AgentLeaseStatus.model_validate(raw)
    except ValidationError:
        pass
    try:
        return AgentLeaseStatus.model_validate({"phase": raw.get("phase")})
    except ValidationError:
        return AgentLeaseStatus()


def lease_conditions(phase: LeasePhase, reason: str, message: str) -> list[ConditionView]:
    """Bound, Expired and Failed: True for the one the phase names, each saying why."""
    return [
        ConditionView(kind, "True" if phase == holds else "False", reason, message)
        for kind, holds in CONDITION_PHASES.items()
    ]


def status_patch(
    status: AgentLeaseStatus,
    previous: Iterable[Mapping[str, Any]] | None,
    *,
    generation: int | None,
    now: str,
) -> tuple[dict[str, Any], list[RawCondition]]:
    """The merge patch that writes ``status`` over a lease whose conditions were ``previous``,
    with the conditions its phase gives (a transition time moves only with a condition's status)
    and the ``generation`` it reflects; and those conditions, for the next patch's ``previous``."""
    if status.phase is None:
        raise ValueError("a lease's status patch must name its phase")
    current = lease_conditions(status.phase, status.reason or "", status.message or "")
    conditions = merge_conditions(previous, current, generation=generation, now=now)
    patch = status.to_patch() | {"conditions": conditions, "observedGeneration": generation}
    return patch, conditions


def pending_status(pool: str) -> AgentLeaseStatus:
    """The lease waits for an agent of ``pool``."""
    return AgentLeaseStatus(
        phase="Pending",
        reason=str(Reason.WAITING),
        message=f"Waiting for an agent of pool {pool}",
    )


def bound_status(
    *,
    pool: str,
    agent: str,
    endpoint: str,
    token_secret_ref: KeyRef,
    bound_time: str,
    expire_time: str,
) -> AgentLeaseStatus:
    """The lease holds ``agent`` until ``expire_time`` (RFC 3339, as the agent was given it):
    where to reach it and with which token."""
    return AgentLeaseStatus(
        phase="Bound",
        agent=agent,
        endpoint=endpoint,
        token_secret_ref=token_secret_ref,
        bound_time=bound_time,
        expire_time=expire_time,
        reason=str(Reason.BOUND),
        message=f"Agent {agent} of pool {pool} is held for this lease until {expire_time}",
    )


def ended_status(phase: EndPhase, reason: str, message: str) -> AgentLeaseStatus:
    """The lease ended: released, expired or failed. Its agent is no longer the client's to
    call, so the fields that said how to reach it are cleared."""
    return AgentLeaseStatus(
        phase=phase,
        reason=reason,
        message=message,
        agent=None,
        endpoint=None,
        token_secret_ref=None,
    )
