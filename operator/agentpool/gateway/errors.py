"""What the gateway answers when it cannot give an output: an HTTP status, a reason, a sentence.

Every refusal is ``{"error": {"reason": REASON, "message": TEXT}}`` with the status the reason
stands for, and ``Retry-After`` where waiting a moment helps (a full waiting line, an exhausted
pool). The functions here turn what went wrong (a checkout that got no agent, an agent's failed
answer) into a :class:`GatewayError`, as data; :mod:`agentpool.gateway.server` writes it.
"""

from __future__ import annotations

import json

from agentpool.api.reasons import GatewayReason
from agentpool.pool.checkin import CheckoutFailed, CheckoutTimedOut, PoolClosed, TooManyWaiters
from agentpool.wire import protocol

#: The agent's reasons for a call that got no answer in time: the gateway's own 504.
_TIMED_OUT = frozenset({protocol.CALL_TIMEOUT})


class GatewayError(Exception):
    """A request the gateway answers with an error: ``status``, one-word ``reason``, a
    ``message`` that says what is wrong and how to mend it, and ``retry_after`` seconds where
    trying again later may succeed."""

    def __init__(
        self, status: int, reason: str, message: str, *, retry_after: float | None = None
    ) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = str(reason)
        self.message = message
        self.retry_after = retry_after

    def body(self) -> bytes:
        """The answer's JSON body."""
        error = {"reason": self.reason, "message": self.message}
        return json.dumps({"error": error}, separators=(",", ":")).encode()


def invalid(message: str) -> GatewayError:
    return GatewayError(400, GatewayReason.INVALID, message)


def unauthorized(message: str) -> GatewayError:
    return GatewayError(401, GatewayReason.UNAUTHORIZED, message)


def forbidden(user: str, verb: str, resource: str, namespace: str, name: str) -> GatewayError:
    """The caller may not ``verb`` ``resource`` (``agentpools/call``, ``agentleases/proxy``, ...)
    of ``name``: worded as the API server words a refusal, with the way to a grant."""
    kind = resource.split("/")[0]
    return GatewayError(
        403,
        GatewayReason.FORBIDDEN,
        f'{kind}.agentpool.dev "{name}" is forbidden: User "{user}" cannot {verb} resource '
        f'"{resource}" in API group "agentpool.dev" in the namespace "{namespace}": bind a Role '
        f"or ClusterRole granting {verb} on {resource} (the chart's agentpool-caller) to the "
        "caller in that namespace",
    )


def pool_not_found(message: str) -> GatewayError:
    """404: ``message`` names the pool that is not there (``pool.checkin.pool_not_found``)."""
    return GatewayError(404, GatewayReason.NOT_FOUND, message)


def session_not_found(namespace: str, pool: str, session: str) -> GatewayError:
    """404 for a request that names a session the pool does not hold."""
    return GatewayError(
        404,
        GatewayReason.SESSION_NOT_FOUND,
        f"pool {namespace}/{pool} holds no session {session[:80]!r}: it never began, ended "
        "(a DELETE, or its idle timeout), or lost its agent; begin a new one",
    )


def too_large(limit: int) -> GatewayError:
    return GatewayError(
        413,
        GatewayReason.TOO_LARGE,
        f"the body is over the gateway's limit of {limit} bytes: send a smaller item, or put "
        "large inputs where the agent can read them and send their address",
    )


def unavailable(message: str, *, retry_after: float) -> GatewayError:
    return GatewayError(503, GatewayReason.UNAVAILABLE, message, retry_after=retry_after)


def from_checkout(error: CheckoutFailed, *, retry_after: float) -> GatewayError:
    """The answer to a checkout that got no agent."""
    message = str(error)
    if isinstance(error, TooManyWaiters):
        return GatewayError(429, GatewayReason.TOO_MANY_WAITERS, message, retry_after=retry_after)
    if isinstance(error, CheckoutTimedOut):
        return GatewayError(503, GatewayReason.POOL_EXHAUSTED, message, retry_after=retry_after)
    if isinstance(error, PoolClosed) and error.reason != PoolClosed.DELETED:
        # Not gone: no longer served here (the operator is stopping); another may serve it.
        return unavailable(message, retry_after=retry_after)
    return GatewayError(404, GatewayReason.NOT_FOUND, message)


class AgentKept(GatewayError):
    """A forwarded request's error after which its agent is kept, not retired: the agent's
    kept connection closed unanswered as the request went, which a well agent's keep-alive
    does."""


def from_agent(reason: str, message: str) -> GatewayError:
    """The answer to a call the agent failed, or that got no answer: the agent's own reason,
    504 when the call timed out and 502 otherwise, as a proxy answers for its upstream."""
    status = 504 if reason in _TIMED_OUT else 502
    return GatewayError(status, reason or protocol.BAD_RESPONSE, message)
