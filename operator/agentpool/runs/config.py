"""The settings one PoolRun is driven by, resolved from its spec and its pools' specs.

The daemon validates the run's spec into :class:`agentpool.api.PoolRunSpec`, then builds a
:class:`RunConfig` with :func:`config_from_spec` and hands it to the engine, so the engine never
reads a spec. Every default is the API model's: a field a spec leaves out, and a field a test
leaves out when it builds a :class:`RunConfig` directly, take the value the CRD documents.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentpool.api import (
    POOL_DEFAULTS,
    RUN_DEFAULTS,
    AgentPoolSpec,
    FailurePolicy,
    PoolRunSpec,
    Routes,
    RunMode,
    refuse_below,
)


@dataclass(frozen=True)
class RunConfig:
    """Everything the engine needs to know about a run, with defaults resolved."""

    name: str
    pool: str | None = None
    routes: Routes | None = None
    item_id: str | None = RUN_DEFAULTS.item_id
    priority: int = RUN_DEFAULTS.priority
    input: Any = RUN_DEFAULTS.input
    cap: int = RUN_DEFAULTS.cap
    mode: RunMode = RUN_DEFAULTS.mode
    failures: FailurePolicy = RUN_DEFAULTS.failures
    max_attempts: int = RUN_DEFAULTS.max_attempts
    backoff_seconds: float = RUN_DEFAULTS.backoff_seconds
    checkout_timeout_seconds: float = POOL_DEFAULTS.checkout_timeout_seconds
    """The run's checkout timeout, or, where it sets none, that of a pool not found yet."""
    call_timeout_seconds: float = POOL_DEFAULTS.call_timeout_seconds
    pool_checkout_timeouts: Mapping[str, float] = field(default_factory=dict)
    """Each pool's own checkout timeout, where the run sets none: a routed run follows each."""
    pool_call_timeouts: Mapping[str, float] = field(default_factory=dict)
    rerun_limit: int | None = None
    """Most items that may have started without their result being written, for a replayable
    source (inline items, a ConfigMap) and no journal: each is written in flight before it
    starts, so an operator crash re-runs at most this many, each with its attempt raised.
    ``None`` means ``cap``. A status write then goes out at least once per this many items
    started: the price of the guarantee without a journal. ``0`` lifts the limit."""

    def __post_init__(self) -> None:
        if self.pool is None and self.routes is None:
            raise ValueError(f"run {self.name}: needs poolRef or routes")
        refuse_below(self, 1, "cap", "max_attempts", subject=f"run {self.name}: ")

    def checkout_timeout(self, pool: str) -> float:
        """The checkout timeout for an item of ``pool``: the run's, else the pool's."""
        return self.pool_checkout_timeouts.get(pool, self.checkout_timeout_seconds)

    def call_timeout(self, pool: str) -> float:
        """The call timeout for an item of ``pool``: the run's, else the pool's."""
        return self.pool_call_timeouts.get(pool, self.call_timeout_seconds)

    def effective_rerun_limit(self, *, replayable: bool, journaled: bool = False) -> int | None:
        """The limit on unwritten starts, or None for none.

        An unreplayable source (the HTTP source) does not give an item again after a crash, so
        holding starts back would bound nothing that a resumed run re-runs: it is not limited.
        Nor is a run with a journal: every finished item is in it the moment it is recorded, so
        a crash re-runs only the items in flight, which ``cap`` bounds already.
        """
        if journaled or not replayable or self.rerun_limit == 0:
            return None
        return self.rerun_limit if self.rerun_limit is not None else self.cap


def config_from_spec(
    name: str, spec: PoolRunSpec, *, pools: Mapping[str, AgentPoolSpec]
) -> RunConfig:
    """Resolve the validated spec of run ``name`` into a :class:`RunConfig`.

    ``pools`` holds the specs of the pools the run names (those found): where the run sets no
    timeout of its own, each item follows its pool's, and a pool not found yet the pool default.
    """
    checkout = spec.checkout_timeout_seconds
    call = spec.call_timeout_seconds
    return RunConfig(
        name=name,
        pool=spec.pool_ref.name if spec.pool_ref is not None else None,
        routes=spec.routes,
        item_id=spec.item_id,
        priority=spec.priority,
        input=spec.input,
        cap=spec.cap,
        mode=spec.mode,
        failures=spec.failures,
        max_attempts=spec.max_attempts,
        backoff_seconds=float(spec.backoff_seconds),
        checkout_timeout_seconds=float(
            checkout if checkout is not None else POOL_DEFAULTS.checkout_timeout_seconds
        ),
        call_timeout_seconds=float(
            call if call is not None else POOL_DEFAULTS.call_timeout_seconds
        ),
        pool_checkout_timeouts=(
            {}
            if checkout is not None
            else {k: float(p.checkout_timeout_seconds) for k, p in pools.items()}
        ),
        pool_call_timeouts=(
            {} if call is not None else {k: float(p.call_timeout_seconds) for k, p in pools.items()}
        ),
    )
