"""The typed API of agentpool: pydantic models of every spec and status, the single source of truth.

The CRDs in ``crds/`` are generated from these models (``agentpool.api.crds``); the pool core, the
run engine and the operator read and write resources through them. Nothing here does I/O or
imports kopf or the kubernetes client, so every layer above can depend on it.
"""

from agentpool.api.base import (
    AnyJson,
    ApiModel,
    CelRule,
    Condition,
    ConditionStatus,
    JsonObject,
    KeyRef,
    NameRef,
    SpecError,
    parse_spec,
    refuse_below,
)
from agentpool.api.leases import AgentLeaseSpec, AgentLeaseStatus, LeasePhase
from agentpool.api.pools import (
    POOL_DEFAULTS,
    AgentPoolSpec,
    AgentPoolStatus,
    HttpGetAction,
    PoolState,
    Probe,
    Recommendation,
    Strategy,
)
from agentpool.api.resources import AgentLease, AgentPool, ObjectMeta, PoolRun
from agentpool.api.runs import (
    FailurePolicy,
    HttpSource,
    ItemFailure,
    PoolRunSpec,
    PoolRunStatus,
    RawItemFailure,
    RawResultRef,
    RawRunStatus,
    ResultRef,
    Routes,
    RunMode,
    RunPhase,
    RunResult,
    Source,
    raw_run_status,
)

__all__ = [
    "POOL_DEFAULTS",
    "AgentLease",
    "AgentLeaseSpec",
    "AgentLeaseStatus",
    "AgentPool",
    "AgentPoolSpec",
    "AgentPoolStatus",
    "AnyJson",
    "ApiModel",
    "CelRule",
    "Condition",
    "ConditionStatus",
    "FailurePolicy",
    "HttpGetAction",
    "HttpSource",
    "ItemFailure",
    "JsonObject",
    "KeyRef",
    "LeasePhase",
    "NameRef",
    "ObjectMeta",
    "PoolRun",
    "PoolRunSpec",
    "PoolRunStatus",
    "PoolState",
    "Probe",
    "RawItemFailure",
    "RawResultRef",
    "RawRunStatus",
    "Recommendation",
    "ResultRef",
    "Routes",
    "RunMode",
    "RunPhase",
    "RunResult",
    "Source",
    "SpecError",
    "Strategy",
    "parse_spec",
    "raw_run_status",
    "refuse_below",
]
