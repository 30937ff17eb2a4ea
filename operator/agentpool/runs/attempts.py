"""Which attempt each unfinished item of a run is on, and how many retries the run has made.

An item without a result is in flight (it holds one of the run's ``cap`` lanes: its checkout or
its call), waiting for a retry (an attempt failed and the next waits for its back-off or a free
agent), or not started. :class:`Attempts` keeps the first two apart, so ``status.active`` never
counts more than ``cap``; it counts ``retries`` when an attempt past an item's first starts, and
takes the count back when the attempt found no agent after all, so ``retries`` always agrees
with the ``attempt`` the agents were given. It also restores both from status and the journal
after an operator restart: an item that may have reached an agent runs again with its attempt
raised, and that attempt is a retry like any other. Without a journal to note starts, the engine
names each item in flight in a status write before it starts (:meth:`Attempts.declared`). The
run ledger owns one and puts what changed into each status patch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from agentpool.api import PoolRunStatus, RawRunStatus


def _map_changes(written: Mapping[str, int], now: Mapping[str, int]) -> dict[str, int | None]:
    """The merge patch that turns map ``written`` into ``now`` (null removes a key)."""
    changes: dict[str, int | None] = {key: None for key in written if key not in now}
    changes.update((key, value) for key, value in now.items() if written.get(key) != value)
    return changes


@dataclass
class Attempts:
    """The attempts of a run's unfinished items, and the durable part of them in status."""

    in_flight: dict[str, int] = field(default_factory=dict)
    """Items holding a lane, with the attempt they are on."""
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
    def restore(cls, status: PoolRunStatus, *, recorded: set[str]) -> Attempts:
        """The attempts as a status written before an operator restart left them."""
        in_flight, retrying = dict(status.in_flight), dict(status.awaiting_retry)
        attempts = cls(
            retries=status.retries,
            in_flight_written=in_flight,
            retrying_written=retrying,
        )
        for key, attempt in [*retrying.items(), *in_flight.items()]:
            if key not in recorded:
                attempts.resumed[key] = max(attempt, attempts.resumed.get(key, 0))
        return attempts

    def replay_start(self, key: str, attempt: int) -> None:
        """The journal says ``key`` started ``attempt``, maybe before the last status write."""
        written = max(self.in_flight_written.get(key, 0), self.retrying_written.get(key, 0))
        if attempt > 1 and attempt > written:
            # Started after the last write: its retry is not in status.retries yet.
            self.retries += 1
        self.resumed[key] = attempt

    def replay_unstart(self, key: str) -> None:
        """The journal says the attempt ``key`` started found no agent: it never happened."""
        attempt = self.resumed.pop(key, None)
        if attempt is None:
            attempt = self.in_flight_written.get(key)
        self._take_back(key, attempt, into=self.resumed)

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
        if attempt > 1:
            self.retries += 1

    def unstart(self, key: str) -> None:
        """The attempt ``key`` started found no agent (or one that refused the operator): it
        does not count, and the item waits for it again."""
        self._take_back(key, self.in_flight.pop(key, None), into=self.retrying)

    def _take_back(self, key: str, attempt: int | None, *, into: dict[str, int]) -> None:
        """``attempt`` of ``key`` never happened: a retry counts no more, and ``into`` notes the
        attempts made before it."""
        if attempt is not None and attempt > 1:
            self.retries -= 1
            into[key] = attempt - 1

    def await_retry(self, key: str) -> None:
        """The attempt ``key`` is on failed, and another follows after a back-off."""
        attempt = self.in_flight.pop(key, None)
        if attempt is not None:
            self.retrying[key] = attempt

    def finish(self, key: str) -> None:
        """``key`` has its result (an output or a failure)."""
        self.in_flight.pop(key, None)
        self.retrying.pop(key, None)

    def declared(self, key: str, attempt: int) -> bool:
        """Whether the last status write named ``key`` in flight on ``attempt``."""
        return self.in_flight_written.get(key) == attempt

    def take_patch(self, declare: Iterable[tuple[str, int]] = ()) -> RawRunStatus:
        """Counts, and the changes to ``inFlight`` and ``awaitingRetry`` since the last write.

        ``declare``: items about to start, written in flight before they do (see
        :meth:`declared`), so that a crash after this write runs them again with their attempt
        raised, whether they reached an agent or not.
        """
        declared = {key: attempt for key, attempt in declare if key not in self.in_flight}
        # A retry written in flight counts from then on: a crash may leave it unknown whether
        # it reached its agent, and the attempt after it is the one the agent is given.
        upcoming = sum(1 for attempt in declared.values() if attempt > 1)
        patch: RawRunStatus = {
            "retries": self.retries + upcoming,
            "active": self.active,
            "retrying": len(self.retrying),
        }
        in_flight = {**self.in_flight, **declared}
        changes = _map_changes(self.in_flight_written, in_flight)
        if changes:
            patch["inFlight"] = changes
            self.in_flight_written = in_flight
        changes = _map_changes(self.retrying_written, self.retrying)
        if changes:
            patch["awaitingRetry"] = changes
            self.retrying_written = dict(self.retrying)
        return patch
