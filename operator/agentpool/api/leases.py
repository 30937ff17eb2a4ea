"""The AgentLease resource: one warm agent claimed by a client that talks to it directly.

A chat session or a multi-step transaction holds an agent for a while; deleting or expiring the
lease returns it. The AgentLease resource in types, rendered into the CRD by
``agentpool.api.crds`` and reconciled by the operator's lease handlers.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from agentpool.api.base import CONDITION_LIST, ApiModel, Condition, KeyRef, NameRef
from agentpool.api.pools import AgentPoolSpec

LeasePhase = Literal["Pending", "Bound", "Released", "Expired", "Failed"]


class AgentLeaseSpec(ApiModel):
    """The claim: which pool, for how long, and whether to queue for an agent."""

    pool_ref: NameRef
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

    def effective_checkout_timeout(self, pool: AgentPoolSpec) -> int:
        """How long the lease's checkout waits for an agent of ``pool``: its own timeout, else
        the pool's."""
        if self.checkout_timeout_seconds is not None:
            return self.checkout_timeout_seconds
        return pool.checkout_timeout_seconds


class AgentLeaseStatus(ApiModel):
    """The lease as the operator last observed it."""

    phase: LeasePhase | None = None
    """Pending (waiting for an agent), Bound (holding one), Released (deleted, its agent going
    back to the pool), Expired (past its ttl) or Failed (it could not be served; see reason)."""
    agent: str | None = None
    """The agent pod bound to this lease; set only while Bound."""
    endpoint: str | None = None
    """The agent's URL, for example http://10.0.0.7:8080, to send protocol requests to; set only
    while Bound, and cleared once the lease is released, expires or fails."""
    token_secret_ref: KeyRef | None = None
    """The Secret key holding the bearer token the agent expects; set only while Bound."""
    bound_time: datetime | None = None
    """When the agent was bound."""
    expire_time: datetime | None = None
    """When the lease expires and the agent returns to the pool."""
    reason: str | None = None
    """Why the lease is in its phase, one CamelCase word: Waiting, Bound, Released, Expired, or
    for Failed PoolNotFound, PoolFull, CheckoutTimeout or AgentLost."""
    message: str | None = None
    """Why the lease is in its phase, as a sentence."""
    observed_generation: int | None = Field(default=None, ge=0)
    """The metadata.generation this status reflects."""
    conditions: list[Condition] = Field(default_factory=list, json_schema_extra=CONDITION_LIST)
    """Bound (True while an agent is held; its message names the pod), Expired (True once the
    lease passed its ttl) and Failed (True once it could not be served), each with the phase's
    reason and message, so kubectl wait --for=condition=Bound waits for an agent."""
