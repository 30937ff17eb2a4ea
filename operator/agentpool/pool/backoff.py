"""Exponential back-off as the kubelet's CrashLoopBackOff does it: doubling, capped, forgiven.

Each failure doubles the wait before the next attempt, from `base_seconds` up to `max_seconds`;
after `reset_after_seconds` without a failure the count starts again. The AgentPool reconciler
holds replacements of quarantined agents with it, and status writes wait by `retry_delay`
between attempts. Pure: the caller passes `now` and keeps the value.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    """The failures counted so far and until when the next attempt waits."""

    base_seconds: float = 1.0
    max_seconds: float = 60.0
    reset_after_seconds: float = 600.0
    failures: int = 0
    last_failure_at: float | None = None
    until: float = 0.0

    def failed(self, now: float) -> Backoff:
        """One more failure at `now`: the next attempt waits twice as long (capped), or
        `base_seconds` again after a healthy period."""
        healthy = (
            self.last_failure_at is None or now - self.last_failure_at >= self.reset_after_seconds
        )
        failures = 1 if healthy else self.failures + 1
        delay = retry_delay(failures, base=self.base_seconds, cap=self.max_seconds)
        return dataclasses.replace(self, failures=failures, last_failure_at=now, until=now + delay)

    def hold(self, now: float) -> float:
        """Seconds left to wait at `now`; 0 when an attempt may go ahead."""
        return max(0.0, self.until - now)


def retry_delay(attempt: int, *, base: float, cap: float) -> float:
    """The wait after the `attempt`-th failure (1-based): base, 2 base, 4 base, ... up to cap."""
    if attempt < 1:
        return 0.0
    return float(min(cap, base * 2.0 ** min(attempt - 1, 62)))
