"""The settings one PoolRun is driven by: its validated spec and what its pools' specs resolve.

The daemon validates the run's spec into :class:`agentpool.api.PoolRunSpec`, then builds a
:class:`RunConfig` with :func:`config_from_spec` and hands it to the engine. The config holds the
spec itself, so every default is the API model's and stands nowhere else; it adds only what the
spec cannot say alone: the timeouts of the pools the run names, and the limit on re-runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from agentpool.api import POOL_DEFAULTS, AgentPoolSpec, PoolRunSpec, Routes


@dataclass(frozen=True)
class RunConfig:
    """Everything the engine needs to know about a run: its spec and what the spec leaves to
    its pools."""

    name: str
    spec: PoolRunSpec
    """The run's validated spec: the engine reads ``cap``, ``mode``, ``priority`` and the rest
    from it."""
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
        if self.spec.pool_ref is None and self.spec.routes is None:
            raise ValueError(f"run {self.name}: needs poolRef or routes")

    # The engine reads these for every item: each is worked out once, on the first read.
    @cached_property
    def pool(self) -> str | None:
        """The one pool of every item, or None for a routed run."""
        return self.spec.pool_ref.name if self.spec.pool_ref is not None else None

    @cached_property
    def routes(self) -> Routes | None:
        """The pool per item, or None for a run of one pool."""
        return self.spec.routes

    @cached_property
    def checkout_timeout_seconds(self) -> float:
        """The run's checkout timeout, or, where it sets none, that of a pool not found yet."""
        own = self.spec.checkout_timeout_seconds
        return float(own if own is not None else POOL_DEFAULTS.checkout_timeout_seconds)

    @cached_property
    def call_timeout_seconds(self) -> float:
        """The run's call timeout, or, where it sets none, that of a pool not found yet."""
        own = self.spec.call_timeout_seconds
        return float(own if own is not None else POOL_DEFAULTS.call_timeout_seconds)

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
        return self.rerun_limit if self.rerun_limit is not None else self.spec.cap


def config_from_spec(
    name: str, spec: PoolRunSpec, *, pools: Mapping[str, AgentPoolSpec]
) -> RunConfig:
    """Resolve the validated spec of run ``name`` into a :class:`RunConfig`.

    ``pools`` holds the specs of the pools the run names (those found): where the run sets no
    timeout of its own, each item follows its pool's, and a pool not found yet the pool default.
    """
    return RunConfig(
        name=name,
        spec=spec,
        pool_checkout_timeouts=(
            {}
            if spec.checkout_timeout_seconds is not None
            else {k: float(p.checkout_timeout_seconds) for k, p in pools.items()}
        ),
        pool_call_timeouts=(
            {}
            if spec.call_timeout_seconds is not None
            else {k: float(p.call_timeout_seconds) for k, p in pools.items()}
        ),
    )
