"""The pool's policy: the part of an AgentPool spec that the pure pool core decides by.

The core takes a small frozen value rather than the API model so that it can be built and tested
on its own and so that a decision depends only on what it is given. The operator builds one with
`PoolPolicy.from_spec` from the validated AgentPool spec each time the spec changes; a policy
built directly takes the spec's defaults for what it leaves out.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass

from agentpool.api import POOL_DEFAULTS, AgentPoolSpec, Strategy, refuse_below
from agentpool.api.base import check_int_or_percent, scaled_value
from agentpool.pool.schedules import Warmth

STRATEGIES: tuple[Strategy, ...] = typing.get_args(Strategy)


@dataclass(frozen=True, slots=True)
class PoolPolicy:
    """How big a pool is, in what order it hands out agents, and when it recycles them.

    Zero means "unlimited" for `max_uses` and `max_lifetime_seconds` and "never" for
    `quarantine_after_failures`, as in the AgentPool spec.
    """

    min_size: int = POOL_DEFAULTS.min_size
    max_size: int = POOL_DEFAULTS.effective_max_size
    strategy: Strategy = POOL_DEFAULTS.strategy
    min_idle: int = POOL_DEFAULTS.min_idle
    idle_timeout_seconds: float = POOL_DEFAULTS.idle_timeout_seconds
    max_uses: int = POOL_DEFAULTS.max_uses
    max_lifetime_seconds: float = POOL_DEFAULTS.max_lifetime_seconds
    quarantine_after_failures: int = POOL_DEFAULTS.quarantine_after_failures
    template_hash: str = ""
    token_hash: str = ""
    """The digest of the pool's token now: agents started with another are replaced."""
    port: int = POOL_DEFAULTS.port
    slots: int = POOL_DEFAULTS.slots
    """Items one agent serves at once."""
    max_surge: int | str = POOL_DEFAULTS.max_surge
    """Pods a rollout may run above the desired agents: a count or a percentage."""
    max_unavailable: int | str = POOL_DEFAULTS.max_unavailable
    """Desired Ready agents a rollout may be without: a count or a percentage."""
    progress_deadline_seconds: float = POOL_DEFAULTS.progress_deadline_seconds
    """Seconds a rollout may go without progress, and an agent may take to turn Ready, before
    the pool reports it."""
    max_unready: int = POOL_DEFAULTS.max_unready
    """The most agents not Ready yet at once: creation waits for them beyond it."""

    def __post_init__(self) -> None:
        if self.min_size < 0:
            raise ValueError(f"minSize must be >= 0, not {self.min_size}")
        if self.max_size < self.min_size:
            raise ValueError(
                f"maxSize ({self.max_size}) must be >= minSize ({self.min_size})",
            )
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be LIFO or FIFO, not {self.strategy!r}")
        refuse_below(
            self,
            0,
            "min_idle",
            "idle_timeout_seconds",
            "max_uses",
            "max_lifetime_seconds",
            "quarantine_after_failures",
        )
        refuse_below(self, 1, "slots", "max_unready", "progress_deadline_seconds")
        for name in ("max_surge", "max_unavailable"):
            check_int_or_percent(getattr(self, name))

    def rollout_bounds(self, desired: int) -> tuple[int, int]:
        """(maxSurge, maxUnavailable) as counts for `desired` agents, rounded as a Deployment
        rounds them (surge up, unavailable down); when both come to 0, one agent may be
        unavailable, as a Deployment allows, so that the rollout can move."""
        surge = scaled_value(self.max_surge, desired, round_up=True)
        unavailable = scaled_value(self.max_unavailable, desired, round_up=False)
        if surge == 0 and unavailable == 0:
            unavailable = 1
        return surge, unavailable

    @property
    def max_overflow(self) -> int:
        """Agents allowed beyond `min_size`: poolboy's `max_overflow`."""
        return self.max_size - self.min_size

    @classmethod
    def from_spec(
        cls,
        spec: AgentPoolSpec,
        *,
        template_hash: str = "",
        token_hash: str = "",
        warmth: Warmth | None = None,
    ) -> PoolPolicy:
        """The policy a validated AgentPool spec describes.

        `template_hash` identifies the pod template the pool wants now, so that agents built
        from an older one are replaced as they fall idle; `token_hash` does the same for the
        pool's token. `warmth` is the minSize and minIdle the spec's schedules put in force now
        (the spec's own without it); a window's minSize above maxSize raises the ceiling too.
        """
        min_size = spec.min_size if warmth is None else warmth.min_size
        return cls(
            min_size=min_size,
            max_size=max(spec.effective_max_size, min_size),
            strategy=spec.strategy,
            min_idle=spec.min_idle if warmth is None else warmth.min_idle,
            idle_timeout_seconds=float(spec.idle_timeout_seconds),
            max_uses=spec.max_uses,
            max_lifetime_seconds=float(spec.max_lifetime_seconds),
            quarantine_after_failures=spec.quarantine_after_failures,
            template_hash=template_hash,
            token_hash=token_hash,
            port=spec.port,
            slots=spec.slots,
            max_surge=spec.max_surge,
            max_unavailable=spec.max_unavailable,
            progress_deadline_seconds=float(spec.progress_deadline_seconds),
            max_unready=spec.max_unready,
        )
