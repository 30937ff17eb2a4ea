"""Which attempt each unfinished item of a run is on, and how many retries the run has made.

An item without a result is in flight (it holds one of the run's ``cap`` slots: its checkout or
its call), waiting for a retry (an attempt failed and the next waits for its back-off or a free
agent), or not started. :class:`Attempts` keeps the first two apart, so ``status.active`` never
counts more than ``cap``, and writes both to status, so that after an operator restart each
runs again with its attempt raised. The run ledger owns one and puts what changed into each
status patch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def _map_changes(written: Mapping[str, int], now: Mapping[str, int]) -> dict[str, int | None]:
    """The merge patch that turns map ``written`` into ``now`` (null removes a key)."""
    changes: dict[str, int | None] = {key: None for key in written if key not in now}
    changes.update((key, value) for key, value in now.items() if written.get(key) != value)
    return changes


@dataclass
class Attempts:
    """The attempts of a run's unfinished items, and the durable part of them in status."""

    in_flight: dict[str, int] = field(default_factory=dict)
    """Items holding a slot, with the attempt they are on."""
    retrying: dict[str, int] = field(default_factory=dict)
    """Items waiting for their next attempt, with the attempts they have made."""
    retries: int = 0
    """Attempts started beyond each item's first."""
    resumed: dict[str, int] = field(default_factory=dict)
    """Items that may have reached an agent before an operator restart, with the attempt they
    were on: each runs again with the next one."""
    in_flight_written: dict[str, int] = field(default_factory=dict)
    """``status.inFlight`` as last written."""
    retrying_written: dict[str, int] = field(default_factory=dict)
    """``status.awaitingRetry`` as last written."""

    @classmethod
    def restore(cls, status: Mapping[str, Any], *, recorded: set[str]) -> Attempts:
        """The attempts as a status written before an operator restart left them."""
        in_flight = {str(k): int(v) for k, v in (status.get("inFlight") or {}).items()}
        retrying = {str(k): int(v) for k, v in (status.get("awaitingRetry") or {}).items()}
        attempts = cls(
            retries=int(status.get("retries") or 0),
            in_flight_written=in_flight,
            retrying_written=retrying,
        )
        for key, attempt in [*retrying.items(), *in_flight.items()]:
            if key not in recorded:
                attempts.resumed[key] = max(attempt, attempts.resumed.get(key, 0))
        return attempts

    def replay_start(self, key: str, attempt: int) -> None:
        """The journal says ``key`` started ``attempt``."""
        self.resumed[key] = attempt

    def replay_unstart(self, key: str) -> None:
        """The journal says the attempt ``key`` started found no agent."""
        self.resumed.pop(key, None)

    def replay_finish(self, key: str) -> None:
        self.resumed.pop(key, None)

    @property
    def active(self) -> int:
        return len(self.in_flight)

    def next_attempt(self, key: str) -> int:
        """The attempt an item starts with when the source gives it: the next after the one it
        may have been on before a restart, else its first."""
        made = self.resumed.pop(key, None)
        return 1 if made is None else made + 1

    def start(self, key: str, attempt: int) -> None:
        self.retrying.pop(key, None)
        self.in_flight[key] = attempt

    def unstart(self, key: str) -> None:
        """The attempt ``key`` started found no agent (or one that refused the operator): the
        item waits for it again."""
        attempt = self.in_flight.pop(key, None)
        if attempt is not None and attempt > 1:
            self.retrying[key] = attempt - 1

    def await_retry(self, key: str) -> None:
        """The attempt ``key`` is on failed, and another follows after a back-off."""
        attempt = self.in_flight.pop(key, None)
        if attempt is not None:
            self.retrying[key] = attempt
            self.retries += 1

    def finish(self, key: str) -> None:
        """``key`` has its result (an output or a failure)."""
        self.in_flight.pop(key, None)
        self.retrying.pop(key, None)

    def take_patch(self) -> dict[str, Any]:
        """Counts, and the changes to ``inFlight`` and ``awaitingRetry`` since the last write."""
        patch: dict[str, Any] = {
            "retries": self.retries,
            "active": self.active,
            "retrying": len(self.retrying),
        }
        in_flight = dict(self.in_flight)
        changes = _map_changes(self.in_flight_written, in_flight)
        if changes:
            patch["inFlight"] = changes
            self.in_flight_written = in_flight
        changes = _map_changes(self.retrying_written, self.retrying)
        if changes:
            patch["awaitingRetry"] = changes
            self.retrying_written = dict(self.retrying)
        return patch
