"""The pool's policy: the part of an AgentPool spec that the pure pool core decides by.

The core takes a small frozen value rather than the API model so that it can be built and tested
on its own and so that a decision depends only on what it is given. The operator and the broker
build one with `PoolPolicy.from_spec` from the AgentPool spec (or anything with the same
snake_case attributes) each time the spec changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Strategy = Literal["LIFO", "FIFO"]
STRATEGIES: tuple[Strategy, ...] = ("LIFO", "FIFO")


@dataclass(frozen=True, slots=True)
class PoolPolicy:
    """How big a pool is, in what order it hands out agents, and when it recycles them.

    Zero means "unlimited" for `max_uses` and `max_lifetime_seconds` and "never" for
    `quarantine_after_failures`, as in the AgentPool spec.
    """

    min_size: int = 1
    max_size: int = 1
    strategy: Strategy = "LIFO"
    min_idle: int = 0
    idle_timeout_seconds: float = 60.0
    max_uses: int = 0
    max_lifetime_seconds: float = 0.0
    quarantine_after_failures: int = 3
    template_hash: str = ""
    token_hash: str = ""
    """The digest of the pool's token now: agents started with another are replaced."""
    port: int = 8080

    def __post_init__(self) -> None:
        if self.min_size < 0:
            raise ValueError(f"minSize must be >= 0, not {self.min_size}")
        if self.max_size < self.min_size:
            raise ValueError(
                f"maxSize ({self.max_size}) must be >= minSize ({self.min_size})",
            )
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be LIFO or FIFO, not {self.strategy!r}")
        for name in ("min_idle", "max_uses", "quarantine_after_failures"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, not {getattr(self, name)}")
        for name in ("idle_timeout_seconds", "max_lifetime_seconds"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, not {getattr(self, name)}")

    @property
    def max_overflow(self) -> int:
        """Agents allowed beyond `min_size`: poolboy's `max_overflow`."""
        return self.max_size - self.min_size

    @classmethod
    def from_spec(cls, spec: Any, *, template_hash: str = "", token_hash: str = "") -> PoolPolicy:
        """Read a policy from an AgentPool spec model (or any object with its snake_case names).

        An attribute that is missing or None takes the spec's default; `max_size` None means
        `min_size`, as the CRD documents. `template_hash` identifies the pod template the pool
        wants now, so that agents built from an older one are replaced as they fall idle.
        """
        defaults = cls()

        def read(name: str, default: Any) -> Any:
            value = getattr(spec, name, None)
            return default if value is None else value

        min_size = int(read("min_size", defaults.min_size))
        strategy = read("strategy", defaults.strategy)
        # An enum member (the API model's StrEnum or a plain Enum) names its value.
        strategy = str(getattr(strategy, "value", strategy))
        return cls(
            min_size=min_size,
            max_size=int(read("max_size", min_size)),
            strategy=_strategy(strategy),
            min_idle=int(read("min_idle", defaults.min_idle)),
            idle_timeout_seconds=float(
                read("idle_timeout_seconds", defaults.idle_timeout_seconds),
            ),
            max_uses=int(read("max_uses", defaults.max_uses)),
            max_lifetime_seconds=float(
                read("max_lifetime_seconds", defaults.max_lifetime_seconds),
            ),
            quarantine_after_failures=int(
                read("quarantine_after_failures", defaults.quarantine_after_failures),
            ),
            template_hash=template_hash,
            token_hash=token_hash,
            port=int(read("port", defaults.port)),
        )


def _strategy(value: str) -> Strategy:
    for strategy in STRATEGIES:
        if value.upper() == strategy:
            return strategy
    raise ValueError(f"strategy must be LIFO or FIFO, not {value!r}")
