"""The gateway's API: what a call or a cast of a pool takes, and where a client finds the gateway.

The operator serves ``POST /v1/namespaces/{namespace}/agentpools/{pool}/call`` (and ``.../cast``)
over HTTPS; the body is a :class:`GatewayRequest`, validated here once, at the edge, by
:mod:`agentpool.gateway.requests`. The operator publishes the gateway's URL and the CA that signs
its certificate in a ConfigMap named :data:`CONFIGMAP` in every namespace that holds a pool, as
Kubernetes publishes ``kube-root-ca.crt``; the Python client reads it there.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import ConfigDict, Field

from agentpool.api.base import AnyJson, ApiModel

GatewayVerb = Literal["call", "cast"]
"""What a request asks: ``call`` (wait for the output) or ``cast`` (hand the item over)."""

VERBS: Final[tuple[GatewayVerb, ...]] = ("call", "cast")

#: The subresources RBAC grants for the two verbs: ``create`` on ``agentpools/call`` or
#: ``agentpools/cast`` in the API group ``agentpool.dev``, as kube-rbac-proxy asks.
SUBRESOURCES: Final[dict[GatewayVerb, str]] = {"call": "call", "cast": "cast"}

#: The subresource of a forwarded request (``.../agentpools/{pool}/proxy/{path}``, or
#: ``.../agentleases/{lease}/proxy/{path}`` to a lease's agent), whose RBAC verb is read from
#: the request's method as the API server reads it for ``pods/proxy``.
PROXY: Final = "proxy"
POOLS: Final = "agentpools"
LEASES: Final = "agentleases"
#: What a forwarded request may name: a pool (any of its agents) or a lease (its agent).
FORWARDED_KINDS: Final = (POOLS, LEASES)
PROXY_VERBS: Final[dict[str, str]] = {
    "GET": "get",
    "HEAD": "get",
    "POST": "create",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}
#: Headers a forwarded request may carry for the gateway itself, as a call's body fields; they are
#: never passed on to the agent.
PRIORITY_HEADER: Final = "Agentpool-Priority"
WAIT_HEADER: Final = "Agentpool-Wait"
CHECKOUT_TIMEOUT_HEADER: Final = "Agentpool-Checkout-Timeout"
CALL_TIMEOUT_HEADER: Final = "Agentpool-Call-Timeout"
#: The header of a forwarded answer that names the agent that served it.
AGENT_HEADER: Final = "Agentpool-Agent"

#: The ConfigMap the operator keeps in each namespace with a pool, and its keys.
CONFIGMAP: Final = "agentpool-gateway"
URL_KEY: Final = "url"
CA_KEY: Final = "ca.crt"

#: Where the operator serves the gateway unless told otherwise, and the Secret of its certificate.
DEFAULT_PORT: Final = 8443
DEFAULT_SECRET: Final = "agentpool-gateway-tls"

#: The path prefix of every gateway endpoint, as the API server's own ``/apis/...`` are versioned.
PATH_PREFIX: Final = "/v1/namespaces"

#: The longest a call may ask to wait for an agent or for its answer: a day, past which a caller
#: should hold a lease or submit a run.
MAX_TIMEOUT_SECONDS: Final = 86400.0


class GatewayRequest(ApiModel):
    """One item for one agent of a pool: the body of a call or a cast.

    The fields a request leaves out take the pool's values, as a PoolRun's do: its
    checkoutTimeoutSeconds and callTimeoutSeconds.
    """

    # The wire names only (camelCase), with no coercion: a body is checked as the API server
    # checks a manifest, so a typo or a quoted number is refused, naming the field.
    model_config = ConfigDict(
        extra="forbid", strict=True, validate_by_name=False, validate_by_alias=True
    )

    item: AnyJson = Field(...)
    """The item, any JSON value: the agent gets it as the envelope's ``item``."""
    input: AnyJson = None
    """Input beside the item, as a run's ``spec.input``."""
    id: str | None = Field(default=None, min_length=1, max_length=253)
    """The item's id in the envelope the agent gets; the gateway names one when it is left out."""
    priority: int = 0
    """Waiters of higher priority are served first (runs', leases' and calls' alike), first come
    first served within one."""
    wait: bool = True
    """Wait for an agent when none is free; false answers 503 PoolExhausted at once."""
    checkout_timeout_seconds: float | None = Field(
        default=None, gt=0, le=MAX_TIMEOUT_SECONDS, allow_inf_nan=False
    )
    """How long to wait for an agent; the pool's checkoutTimeoutSeconds by default."""
    call_timeout_seconds: float | None = Field(
        default=None, gt=0, le=MAX_TIMEOUT_SECONDS, allow_inf_nan=False
    )
    """How long the agent may take over the item; the pool's callTimeoutSeconds by default. An
    agent whose call timed out is retired."""
