"""The words the project writes into conditions, failures and Events, in one place.

Condition types and reasons are API: users match on them (``kubectl wait --for=condition=...``,
alerts, scripts), so each is one CamelCase word defined once here and used by the pool core, the
run engine, the operator and the tests alike. Members are ``str`` so they go on the wire as is.
The words both sides of the agent protocol say are the protocol's, taken from
:mod:`agentpool.wire.protocol`.
"""

from __future__ import annotations

from enum import StrEnum

from agentpool.wire import protocol


class ConditionType(StrEnum):
    """The ``type`` of a condition in a status."""

    READY = "Ready"
    """AgentPool: at least minSize agents are Ready."""
    DEGRADED = "Degraded"
    """AgentPool: some agents cannot start or stay healthy; the reason says why."""
    PROGRESSING = "Progressing"
    """AgentPool: True while a rollout moves or once it is complete; False when it is stuck."""
    COMPLETE = "Complete"
    """PoolRun: dispatch ended and the run succeeded."""
    FAILED = "Failed"
    """PoolRun or AgentLease: it ended without success."""
    SUSPENDED = "Suspended"
    """PoolRun: dispatch is paused by spec.suspend."""
    WAITING = "Waiting"
    """PoolRun: items cannot start for now; the reason says what the run waits for."""
    BOUND = "Bound"
    """AgentLease: an agent is held for the client."""
    EXPIRED = "Expired"
    """AgentLease: it passed its ttl and its agent went back to the pool."""


class Reason(StrEnum):
    """The ``reason`` of a condition, of an item failure, or of a lease's phase."""

    # AgentPool Ready / Degraded
    AGENTS_READY = "AgentsReady"
    AGENTS_STARTING = "AgentsStarting"
    AS_EXPECTED = "AsExpected"
    IMAGE_PULL_BACK_OFF = "ImagePullBackOff"
    CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"
    CREATE_CONTAINER_CONFIG_ERROR = "CreateContainerConfigError"
    READINESS_FAILING = "ReadinessFailing"
    UNSCHEDULABLE = "Unschedulable"
    POD_FAILED = "PodFailed"
    NO_LOCAL_COMMAND = "NoLocalCommand"
    ROLLING_OUT = "RollingOut"
    ROLLOUT_COMPLETE = "RolloutComplete"
    PROGRESS_DEADLINE_EXCEEDED = "ProgressDeadlineExceeded"
    CREATE_FAILED = "CreateFailed"
    AGENTS_NOT_READY = "AgentsNotReady"
    OUTSIDE_PROTOCOL = "OutsideProtocol"
    """AgentPool Degraded: the agents answer requests of the agent protocol with something else
    (a web server's 404 page, say), several in a row: they do not speak the protocol."""
    INVALID_SPEC = "InvalidSpec"
    """AgentPool Ready: the spec reached the operator but does not validate (a cron expression
    or time zone the CRD schema cannot check); the message names the field."""

    # PoolRun outcome and causes
    RUNNING = "Running"
    DRAINED = "Drained"
    DEADLOCKED = "Deadlocked"
    ITEMS_FAILED = "ItemsFailed"
    SUSPENDED = "Suspended"
    RESUMED = "Resumed"
    POOL_NOT_FOUND = "PoolNotFound"
    NO_CAPACITY = "NoCapacity"
    CHECKOUT_TIMEOUT = "CheckoutTimeout"
    SOURCE_FAILED = "SourceFailed"
    SOURCE_NOT_FOUND = "SourceNotFound"
    SOURCE_INVALID = "SourceInvalid"
    SOURCE_UNREACHABLE = "SourceUnreachable"
    SOURCE_CHANGED = "SourceChanged"
    SOURCE_PENDING = "SourcePending"
    PROTOCOL_MISMATCH = "ProtocolMismatch"
    """PoolRun Waiting: a pool the run names serves another protocol than the run speaks to it
    (spec.request set for a pool of the agent protocol, or unset for an HTTP pool)."""

    # Item failures
    HANDLER_ERROR = protocol.HANDLER_ERROR
    CALL_FAILED = "CallFailed"
    OUTPUT_TOO_LARGE = "OutputTooLarge"
    CALL_TIMEOUT = protocol.CALL_TIMEOUT
    AGENT_LOST = protocol.AGENT_LOST
    AGENT_BUSY = "AgentBusy"
    UNAUTHORIZED = protocol.UNAUTHORIZED
    INVALID_RESPONSE = "InvalidResponse"
    HTTP_STATUS = "HTTPStatus"
    """An HTTP pool's agent answered an item's request (spec.request) with a status outside
    2xx."""
    NO_ROUTE = "NoRoute"
    DUPLICATE_ID = "DuplicateId"
    MISSING_ID = "MissingId"

    # AgentLease
    WAITING = "Waiting"
    BOUND = "Bound"
    POOL_FULL = "PoolFull"
    RELEASED = "Released"
    EXPIRED = "Expired"
    CONTEXT_TOO_LARGE = "ContextTooLarge"
    """spec.context is over the limit as compact JSON; no agent was taken."""
    BIND_UNSUPPORTED = "BindUnsupported"
    """The agent answered POST /bind 404, 405 or 501: it cannot take a lease's own token, and
    the pool's token is never handed out instead."""
    BIND_FAILED = protocol.BIND_FAILED
    """The agent refused or failed POST /bind (its bind function raised, say)."""


class GatewayReason(StrEnum):
    """The ``reason`` of a gateway answer that is not the agent's own, one per HTTP status.

    A call the agent failed is answered with the agent's reason (``HandlerError``, ``Busy``,
    ...) or the operator's word for a call that got no answer (``CallTimeout``, ``AgentLost``).
    """

    INVALID = "Invalid"
    """400: the body is not a call (not JSON, a field of the wrong type, an unknown field)."""
    UNAUTHORIZED = "Unauthorized"
    """401: no bearer token, or one the cluster does not authenticate."""
    FORBIDDEN = "Forbidden"
    """403: the caller may not create agentpools/call (or /cast), or the method's verb on
    agentpools/proxy, of that pool."""
    NOT_FOUND = "NotFound"
    """404: no such pool (or no such path)."""
    SESSION_NOT_FOUND = "SessionNotFound"
    """404: a request names a session the pool does not hold (never begun, ended by a DELETE or
    its idle timeout, or its agent lost): begin a new one."""
    METHOD_NOT_ALLOWED = "MethodNotAllowed"
    """405: the path takes POST only (a forwarded request: a method RBAC has a verb for)."""
    TOO_LARGE = "TooLarge"
    """413: the body is over the gateway's limit."""
    TOO_MANY_WAITERS = "TooManyWaiters"
    """429: the pool's waiting line is at its bound (spec.maxWaiters)."""
    POOL_EXHAUSTED = "PoolExhausted"
    """503: no agent came free within the checkout timeout, or none was free and the call
    would not wait."""
    UNAVAILABLE = "Unavailable"
    """503: the pool is not served here now (the operator is stopping, or starting it)."""


class RetireReason(StrEnum):
    """Why the pool retires an agent (the AgentRetired Event and the pool core's plans)."""

    FAILED = "Failed"  # the pod failed or crash-loops
    IDLE_TIMEOUT = "IdleTimeout"
    MAX_USES = "MaxUses"
    MAX_LIFETIME = "MaxLifetime"
    QUARANTINED = "Quarantined"
    CALL_TIMED_OUT = "CallTimedOut"
    RESET_FAILED = "ResetFailed"
    OUTDATED = "Outdated"
    TOKEN_CHANGED = "TokenChanged"
    SCALED_DOWN = "ScaledDown"
    UNREADY = "Unready"


class EventReason(StrEnum):
    """The ``reason`` of an Event the operator posts."""

    SCALED_UP = "ScaledUp"
    SCALED_DOWN = "ScaledDown"
    HEADROOM_CHANGED = "HeadroomChanged"
    """AgentPool, headroom Auto: minIdle followed the sizing advice; the message has the
    figures."""
    AGENT_RETIRED = "AgentRetired"
    AGENT_REPLACED = "AgentReplaced"
    CREATE_FAILED = "CreateFailed"
    AGENTS_NOT_READY = "AgentsNotReady"
    OUTSIDE_PROTOCOL = "OutsideProtocol"
    """AgentPool Degraded: the agents answer requests of the agent protocol with something else
    (a web server's 404 page, say), several in a row: they do not speak the protocol."""
    STARTED = "Started"
    ITEM_FAILED = "ItemFailed"
    DRAINED = "Drained"
    DEADLOCKED = "Deadlocked"
    SOURCE_FAILED = "SourceFailed"
    SUSPENDED = "Suspended"
    RESUMED = "Resumed"
    LEASE_BOUND = "LeaseBound"
    LEASE_EXPIRED = "LeaseExpired"
    POOL_FULL = "PoolFull"
    TOKEN_SECRET_RECREATED = "TokenSecretRecreated"
    TOKEN_ROTATED = "TokenRotated"
    AGENT_UNAUTHORIZED = "AgentUnauthorized"
