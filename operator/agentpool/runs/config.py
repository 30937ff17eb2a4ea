"""The settings one PoolRun is driven by, resolved from its spec and its pool's defaults.

The daemon builds a :class:`RunConfig` with :func:`config_from_spec` (or directly) and hands it to
the engine, so the engine never reads a raw spec and the defaults live in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Mode = Literal["Call", "Cast"]
FailurePolicy = Literal["Fail", "Report"]


@dataclass(frozen=True)
class Routes:
    """Send each item to the pool named by the value of one of its fields."""

    field: str
    pools: Mapping[str, str]


@dataclass(frozen=True)
class PoolTimeouts:
    """A pool's own checkout and call timeouts, which its runs follow unless they set theirs."""

    checkout: float = 30.0
    call: float = 300.0


@dataclass(frozen=True)
class RunConfig:
    """Everything the engine needs to know about a run, with defaults resolved."""

    name: str
    pool: str | None = None
    routes: Routes | None = None
    item_id: str | None = None
    priority: int = 0
    input: Any = None
    cap: int = 1
    mode: Mode = "Call"
    failures: FailurePolicy = "Fail"
    max_attempts: int = 1
    backoff_seconds: float = 0.0
    checkout_timeout_seconds: float = 30.0
    call_timeout_seconds: float = 300.0
    pool_checkout_timeouts: Mapping[str, float] = field(default_factory=dict)
    """Each pool's own checkout timeout, where the run sets none: a routed run follows each."""
    pool_call_timeouts: Mapping[str, float] = field(default_factory=dict)
    status_interval_seconds: float = 1.0
    rerun_limit: int | None = None
    """Most items that may have started without their result being written, for a replayable
    source (inline items, a ConfigMap) and no journal: each is written in flight before it
    starts, so an operator crash re-runs at most this many, each with its attempt raised.
    ``None`` means ``cap``. A status write then goes out at least once per this many items
    started: the price of the guarantee without a journal. ``0`` lifts the limit."""
    held_write_gap_seconds: float = 0.1
    """When the re-run limit holds dispatch and nothing is running, the next status write goes
    this long after the last instead of a whole interval, so short items do not idle."""

    def __post_init__(self) -> None:
        if self.pool is None and self.routes is None:
            raise ValueError(f"run {self.name}: needs poolRef or routes")
        if self.cap < 1:
            raise ValueError(f"run {self.name}: cap must be at least 1, not {self.cap}")
        if self.max_attempts < 1:
            raise ValueError(f"run {self.name}: maxAttempts must be at least 1")

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
    name: str,
    spec: Mapping[str, Any],
    *,
    pools: Mapping[str, PoolTimeouts] | None = None,
    status_interval_seconds: float = 1.0,
) -> RunConfig:
    """Resolve a PoolRun ``spec`` (camelCase, as stored) into a :class:`RunConfig`.

    ``pools`` holds the timeouts of the pools the run names; the run's own override them.
    """
    pool_ref = spec.get("poolRef") or {}
    routes_spec = spec.get("routes")
    routes = None
    if routes_spec:
        pools_of_routes = routes_spec.get("pools", routes_spec.get("map", {}))
        routes = Routes(field=str(routes_spec["field"]), pools=dict(pools_of_routes))
    checkout = spec.get("checkoutTimeoutSeconds")
    call = spec.get("callTimeoutSeconds")
    pools = pools or {}
    return RunConfig(
        name=name,
        pool=pool_ref.get("name"),
        routes=routes,
        item_id=spec.get("itemId"),
        priority=int(spec.get("priority", 0)),
        input=spec.get("input"),
        cap=int(spec.get("cap", 1)),
        mode=spec.get("mode", "Call"),
        failures=spec.get("failures", "Fail"),
        max_attempts=int(spec.get("maxAttempts", 1)),
        backoff_seconds=float(spec.get("backoffSeconds", 1.0)),
        checkout_timeout_seconds=float(checkout if checkout is not None else 30.0),
        call_timeout_seconds=float(call if call is not None else 300.0),
        pool_checkout_timeouts=(
            {} if checkout is not None else {k: v.checkout for k, v in pools.items()}
        ),
        pool_call_timeouts={} if call is not None else {k: v.call for k, v in pools.items()},
        status_interval_seconds=status_interval_seconds,
    )
