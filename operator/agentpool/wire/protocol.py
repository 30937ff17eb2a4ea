"""The words of the agent protocol (v1), shared by every side of it.

The agent SDK (``agentpool.agent.server``) and the local kubelet's simulated agent answer with
these paths, headers and reasons; the operator's agent client (``agentpool.io.agents``), the
Python client (``agentpool.client``) and the gateway recognise them; the API's reasons
(``agentpool.api.reasons``) and the agent pod's variables (``agentpool.pool.manifests``) are
taken from them, so no two sides can drift apart. This module imports nothing but the standard
library so any side can use it cheaply.
"""

from __future__ import annotations

from typing import Final

HEALTHZ_PATH: Final = "/healthz"
INVOKE_PATH: Final = "/invoke"
STATUS_PATH: Final = "/status"
RESET_PATH: Final = "/reset"
#: A lease's own token, expiry and context handed to the agent it binds, and taken back.
BIND_PATH: Final = "/bind"
UNBIND_PATH: Final = "/unbind"

#: A request carrying ``Prefer: respond-async`` asks for a cast: the agent answers 202 at once and
#: runs the item in the background, reporting itself busy in ``/status`` until it is done.
PREFER_HEADER: Final = "Prefer"
RESPOND_ASYNC: Final = "respond-async"

#: A request carrying ``Accept: text/event-stream`` asks for a streamed answer: the agent may
#: answer with server-sent events, one per part of the output as its handler makes it
#: (:mod:`agentpool.wire.events`), or ignore the header and answer JSON as to any call.
ACCEPT_HEADER: Final = "Accept"
EVENT_STREAM: Final = "text/event-stream"

#: Environment variables the SDK reads; the operator sets them on every agent pod.
TOKEN_ENV: Final = "AGENTPOOL_TOKEN"
HOST_ENV: Final = "AGENT_HOST"
PORT_ENV: Final = "AGENT_PORT"
#: How many items the agent serves at once (the pool's ``slots``); 1 when unset.
SLOTS_ENV: Final = "AGENTPOOL_SLOTS"
DRAIN_ENV: Final = "AGENT_DRAIN_SECONDS"
LOG_LEVEL_ENV: Final = "AGENT_LOG_LEVEL"

#: A pod serves its protocol on every interface; the local kubelet narrows it to one loopback.
DEFAULT_HOST: Final = "0.0.0.0"
DEFAULT_PORT: Final = 8080
#: Kubernetes' default termination grace period, so an agent drains for as long as it is allowed.
DEFAULT_DRAIN_SECONDS: Final = 30.0
DEFAULT_SLOTS: Final = 1

# Reasons in ``{"error": {"reason", "message"}}`` answers, and the ones the client adds itself.
BAD_REQUEST: Final = "BadRequest"
UNAUTHORIZED: Final = "Unauthorized"
BUSY: Final = "Busy"
NOT_READY: Final = "NotReady"
DRAINING: Final = "Draining"
HANDLER_ERROR: Final = "HandlerError"
RESET_UNSUPPORTED: Final = "ResetUnsupported"
RESET_FAILED: Final = "ResetFailed"
ALREADY_BOUND: Final = "AlreadyBound"
BIND_FAILED: Final = "BindFailed"
UNBIND_FAILED: Final = "UnbindFailed"
#: The client's own reasons: the call outlived its timeout, the connection failed or dropped, or
#: the answer was not the protocol's JSON. After the first two the agent's state is unknown.
CALL_TIMEOUT: Final = "CallTimeout"
AGENT_LOST: Final = "AgentLost"
BAD_RESPONSE: Final = "BadResponse"

#: Where a user reads the protocol: the manual's page "Agent protocol", at this path of the
#: repository.
REFERENCE: Final = "docs/reference/protocol.md"


def outside_protocol(endpoint: str, request: str, status: int, body: str) -> str:
    """The message of a ``BadResponse``: the agent at ``endpoint`` answered ``request`` (such as
    ``POST /invoke``) with HTTP ``status`` and ``body`` (its start), which is not the protocol's
    JSON; it names the request and where the protocol is written, so the reader can tell a
    server that speaks something else (a web server on the pool's port, a wrong ``port``)."""
    return (
        f"the agent at {endpoint} answered {request} with HTTP {status} outside the protocol "
        f"(see the agent protocol: {REFERENCE}): {body!r}"
    )
