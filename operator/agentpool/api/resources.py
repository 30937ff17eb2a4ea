"""Whole objects of the three kinds: apiVersion, kind, metadata, spec and status in one model.

The operator and the CLI read objects from the API server as dicts; these models turn one into
typed values in a single call (``AgentPool.model_validate(raw)``) and back (``to_wire()``).
``metadata`` keeps every field the API server sends, typed where the project reads it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Generic, Literal, TypeVar

from pydantic import ConfigDict, Field

from agentpool import API_VERSION
from agentpool.api.base import ApiModel
from agentpool.api.leases import AgentLeaseSpec, AgentLeaseStatus
from agentpool.api.pools import AgentPoolSpec, AgentPoolStatus
from agentpool.api.runs import PoolRunSpec, PoolRunStatus


class OwnerReference(ApiModel):
    """``metadata.ownerReferences[]``: an object this one belongs to, which garbage collection
    follows."""

    model_config = ConfigDict(extra="allow")

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(ApiModel):
    """The metadata the project reads; other fields are kept as they came."""

    model_config = ConfigDict(extra="allow")

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    finalizers: list[str] = Field(default_factory=list)
    owner_references: list[OwnerReference] = Field(default_factory=list)


SpecT = TypeVar("SpecT", bound=ApiModel)
StatusT = TypeVar("StatusT", bound=ApiModel)


class KubeObject(ApiModel, Generic[SpecT, StatusT]):
    """What every object of the three kinds is: the envelope, its spec, and its status.

    An object read before the operator wrote any status has an empty one: ``{}`` validated
    into the kind's status model, so every field holds its default.
    """

    api_version: str = API_VERSION
    kind: str
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: SpecT
    status: StatusT = Field(default_factory=dict, validate_default=True)


class AgentPool(KubeObject[AgentPoolSpec, AgentPoolStatus]):
    """A pool of warm agents."""

    kind: Literal["AgentPool"] = "AgentPool"


class PoolRun(KubeObject[PoolRunSpec, PoolRunStatus]):
    """A stream of work items driven through pools."""

    kind: Literal["PoolRun"] = "PoolRun"


class AgentLease(KubeObject[AgentLeaseSpec, AgentLeaseStatus]):
    """One agent held for a client."""

    kind: Literal["AgentLease"] = "AgentLease"
