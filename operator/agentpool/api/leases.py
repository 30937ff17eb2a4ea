"""The AgentLease resource: one warm agent claimed by a client that talks to it directly.

A chat session or a multi-step transaction holds an agent for a while; deleting or expiring the
lease returns it. The holder renews it by writing ``spec.renewTime``, as the holder of a
``coordination.k8s.io`` Lease does, and reaches its agent with a token of the lease's own, kept
in a Secret the lease owns. The AgentLease resource in types, rendered into the CRD by
``agentpool.api.crds`` and reconciled by the operator's lease handlers.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from agentpool.api import base
from agentpool.api.pools import AgentPoolSpec

LeasePhase = Literal["Pending", "Bound", "Released", "Expired", "Failed"]

MAX_CONTEXT_BYTES = 65536
"""The most ``spec.context`` may take as compact JSON: it is handed to the agent in one request
when the lease binds, and a lease bigger than that fails with reason ContextTooLarge."""

TOKEN_SECRET_SUFFIX = "-lease-token"
"""A lease's token is kept in the Secret ``<lease>-lease-token``, which the lease owns."""

#: The Secret that holds a lease's token is named after the lease, so the lease's name leaves
#: room for the suffix within the 253 characters of a Secret's name.
LEASE_NAME_RULE = base.CelRule(
    rule=f"self.metadata.name.size() <= {253 - len(TOKEN_SECRET_SUFFIX)}",
    message=f"an AgentLease's name prefixes its token Secret's (<name>{TOKEN_SECRET_SUFFIX}), "
    f"at most {253 - len(TOKEN_SECRET_SUFFIX)} characters: choose a shorter name",
)


class AgentLeaseSpec(base.ApiModel):
    """The claim: which pool, for how long, and whether to queue for an agent."""

    pool_ref: base.NameRef
    """The AgentPool, in the same namespace, to take an agent from."""
    ttl_seconds: int = Field(default=300, ge=1)
    """Seconds the agent is held once bound; past that the lease expires and the agent returns
    to the pool, so a leaked lease cannot drain it."""
    wait: bool = True
    """Queue for an agent when none is idle; false fails at once with reason PoolFull, like a
    non-blocking checkout."""
    priority: int = 0
    """Checkouts of higher priority are served first, first come first served within one."""
    checkout_timeout_seconds: int | None = Field(default=None, ge=1)
    """How long to wait for an agent; overrides the pool's."""
    # Free JSON is out of CEL's view (the API server refuses a rule on a field without a type),
    # so no rule can keep it fixed: the operator reads it once, when the lease binds.
    context: base.AnyJson = None
    """Any JSON value handed to the agent when the lease binds (a session, a user, a task), at
    most 64 KiB as compact JSON. It is read once, when the lease binds: a change afterwards does
    not reach the agent, and the agent forgets it when the lease ends."""
    renew_time: datetime | None = None
    """Set by the holder to keep its agent: the lease expires ttlSeconds after the later of its
    bound time and this, as a coordination.k8s.io Lease does. A renewal after the lease ended
    changes nothing."""

    def effective_checkout_timeout(self, pool: AgentPoolSpec) -> int:
        """How long the lease's checkout waits for an agent of ``pool``: its own timeout, else
        the pool's."""
        if self.checkout_timeout_seconds is not None:
            return self.checkout_timeout_seconds
        return pool.checkout_timeout_seconds


class AgentLeaseStatus(base.ApiModel):
    """The lease as the operator last observed it."""

    phase: LeasePhase | None = None
    """Pending (waiting for an agent), Bound (holding one), Expired (past its ttl) or Failed (it
    could not be served; see reason). A deleted lease goes at once, its agent back to the pool;
    Released is only read, from a lease an earlier operator was ending."""
    agent: str | None = None
    """The agent pod bound to this lease; set only while Bound."""
    endpoint: str | None = None
    """The agent's URL, for example http://10.0.0.7:8080, to send protocol requests to; set only
    while Bound, and cleared once the lease is released, expires or fails."""
    token_secret_ref: base.KeyRef | None = None
    """The Secret key holding this lease's own bearer token (the Secret <lease>-lease-token,
    owned by the lease): it is accepted by this lease's agent only, on /invoke and /status, and
    only while the lease is Bound. Set only while Bound; the Secret is deleted when the lease
    expires or fails, and goes with the lease when it is deleted."""
    bound_time: datetime | None = None
    """When the agent was bound."""
    expire_time: datetime | None = None
    """When the lease expires and the agent returns to the pool; each renewal moves it."""
    reason: str | None = None
    """Why the lease is in its phase, one CamelCase word: Waiting, Bound, Expired, or
    for Failed PoolNotFound, PoolFull, CheckoutTimeout, AgentLost, ContextTooLarge, BindUnsupported
    or BindFailed."""
    message: str | None = None
    """Why the lease is in its phase, as a sentence."""
    observed_generation: int | None = Field(default=None, ge=0)
    """The metadata.generation this status reflects."""
    conditions: list[base.Condition] = Field(
        default_factory=list, json_schema_extra=base.CONDITION_LIST
    )
    """Bound (True while an agent is held; its message names the pod), Expired (True once the
    lease passed its ttl) and Failed (True once it could not be served), each with the phase's
    reason and message, so kubectl wait --for=condition=Bound waits for an agent."""
