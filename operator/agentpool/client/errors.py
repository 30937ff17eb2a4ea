"""The errors the client raises: each carries a reason (one CamelCase word) and a message.

The reasons are the operator's own where it gave one (a lease's ``status.reason``, a run's
Failed condition, an agent's ``{"error": {"reason", "message"}}``), so a program matches on the
same words ``kubectl describe`` shows; the few the client says itself are named here.
:func:`lease_error` and :func:`run_error` turn a status into its error, as data, for
:mod:`agentpool.client.leases` and :mod:`agentpool.client.runs`.
"""

from __future__ import annotations

from agentpool.api import AgentLeaseStatus, PoolRunStatus
from agentpool.api.reasons import ConditionType, Reason

#: The lease was not Bound, nor failed, within the client's wait: no operator answered.
BIND_TIMEOUT = "BindTimeout"
#: The lease was deleted by someone else while the client waited for it or held it.
LEASE_DELETED = "LeaseDeleted"
#: The run was deleted while the client followed it.
RUN_DELETED = "RunDeleted"
#: The API server refused a request; its own reason (Forbidden, Invalid, ...) is used when it
#: gives one.
API_ERROR = "ApiError"
#: A spec the client was asked to create does not fit its model.
INVALID = "Invalid"
#: No kubeconfig or in-cluster service account says where the API server is.
NO_CLUSTER = "NoCluster"

#: The lease reasons that mean "no agent could be had" rather than "something broke".
EXHAUSTED_REASONS = frozenset({str(Reason.POOL_FULL), str(Reason.CHECKOUT_TIMEOUT)})


class AgentpoolError(Exception):
    """Something the client was asked to do did not happen; ``reason`` says why in one word."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


class NotFound(AgentpoolError):
    """The pool or run named does not exist in the client's namespace."""


class PoolExhausted(AgentpoolError):
    """No agent could be had: the pool is full and the lease would not wait (PoolFull), or none
    came free within the checkout timeout (CheckoutTimeout); through the gateway, PoolExhausted,
    or TooManyWaiters when the pool's waiting line is at its bound."""

    retry_after: float | None = None
    """Seconds the gateway asked the caller to wait before trying again, when it said."""


class LeaseFailed(AgentpoolError):
    """The lease could not be served (PoolNotFound, BindFailed, ContextTooLarge, ...), or it
    ended while the client still held it (Expired, AgentLost, LeaseDeleted)."""


class CallFailed(AgentpoolError):
    """The agent answered an invoke with an error (HandlerError, Busy, ...), or no answer came
    (CallTimeout, AgentLost: the agent's state is unknown)."""


class RunFailed(AgentpoolError):
    """The run ended Failed (ItemsFailed, Deadlocked, SourceFailed, ...); ``status`` is the
    run's status as it ended."""

    def __init__(self, reason: str, message: str, *, status: PoolRunStatus) -> None:
        super().__init__(reason, message)
        self.status = status


def lease_error(status: AgentLeaseStatus) -> AgentpoolError | None:
    """The error a lease in ``status`` means for its holder, or None while it is Pending or
    Bound: :class:`PoolExhausted` when no agent could be had, else :class:`LeaseFailed`."""
    if status.phase in (None, "Pending", "Bound"):
        return None
    reason = status.reason or str(status.phase)
    message = status.message or f"the lease is {status.phase}"
    if reason in EXHAUSTED_REASONS:
        return PoolExhausted(reason, message)
    return LeaseFailed(reason, message)


def run_error(status: PoolRunStatus) -> RunFailed | None:
    """The error a run that ended Failed raises from ``wait()``, or None for any other phase."""
    if status.phase != "Failed":
        return None
    failed = next(
        (c for c in status.conditions if c.type == ConditionType.FAILED and c.status == "True"),
        None,
    )
    reason = (failed.reason if failed else None) or str(Reason.ITEMS_FAILED)
    message = status.message or (failed.message if failed else None) or "the run failed"
    return RunFailed(reason, message, status=status)
