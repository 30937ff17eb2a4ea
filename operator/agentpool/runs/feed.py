"""Which item a run starts next: taken from its source, admitted, and let through the re-run limit.

The engine's lanes ask the :class:`Feed` for their next item. It comes from the backlog (retries
that are due first), and when that is empty from the intake: an item recorded already is
skipped, one that cannot be named or routed fails at once, the rest join the backlog with the
attempt they start on. A run with a re-run limit (no journal to note starts) lets an item start
only once a status write named it in flight (:meth:`Feed.upcoming` says which to name); until
then the feed is ``held``. A source that fails stops the feed for good, as does one the daemon
finds changed under the run (:meth:`Feed.stop`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import KW_ONLY, InitVar, dataclass, field

from agentpool.api.reasons import Reason
from agentpool.runs.backlog import Backlog, Work
from agentpool.runs.config import RunConfig
from agentpool.runs.intake import Intake
from agentpool.runs.items import Named, Rejection, route_item
from agentpool.runs.journaling import Recorder
from agentpool.runs.reporting import Reporter
from agentpool.runs.retries import Retries
from agentpool.runs.shared import RunShared
from agentpool.runs.sources import SourceError
from agentpool.runs.status import RunLedger


@dataclass(slots=True, eq=False, repr=False)
class Feed:
    """The items a run's lanes start, one at a time, in order."""

    config: RunConfig
    shared: InitVar[RunShared]
    _: KW_ONLY
    intake: Intake
    retries: Retries
    report: Reporter
    rerun_limit: int | None
    ledger: RunLedger = field(init=False)
    records: Recorder = field(init=False)
    changed: Callable[[], None] = field(init=False)
    """Called when status has news."""
    held: bool = field(default=False, init=False)
    """The re-run limit stopped the feed: only a status write lets more items start."""
    source_error: str | None = field(default=None, init=False)
    """Why the source gives no more items, when it failed."""
    source_reason: str = field(default=Reason.SOURCE_FAILED, init=False)
    _backlog: Backlog = field(default_factory=Backlog, init=False)

    def __post_init__(self, shared: RunShared) -> None:
        self.ledger, self.records, self.changed = shared.ledger, shared.records, shared.changed

    def stop(self, reason: str, message: str) -> bool:
        """The source can no longer be trusted: take nothing more from it. False when it had
        stopped already."""
        if self.source_error is not None:
            return False
        self.source_error, self.source_reason = message, reason
        self.changed()
        return True

    def promote(self, now: float) -> None:
        """Retries due at ``now`` start before anything else."""
        due = self.retries.take_due(now)
        if due:
            self._backlog.put_back_all(due)

    def put_back(self, work: Work) -> None:
        """``work`` found no agent: it starts first when one is free."""
        self._backlog.put_back(work)

    def park(self, work: Work, cause: str) -> None:
        """``work``'s pool does not exist: it and the rest of its pool's items never start."""
        self._backlog.park(work, cause)

    @property
    def drained(self) -> bool:
        """No item is left to start: the source is done, the backlog empty, no retry waits."""
        return self.intake.done and not self._backlog and not self.retries

    def missing(self) -> Collection[str]:
        """Why parked items cannot start: one cause per missing pool."""
        return self._backlog.missing()

    def reopen(self) -> None:
        """A fill of the run's lanes begins: it is held only if the limit stops it again."""
        self.held = False

    async def take(self, now: float) -> Work | None:
        """The next item to start, marked started; None when none may start now."""
        try:
            return await self._take(now)
        finally:
            # What finished, and the start of what starts, reach the kernel before its call:
            # a crash re-runs at most cap items, each with its attempt raised.
            self.records.flush()

    async def _take(self, now: float) -> Work | None:
        while True:
            work = self._backlog.first()
            if work is None:
                if not await self._pull(now):
                    return None
                continue
            limit = self.rerun_limit
            if limit is not None and not self.ledger.attempts.declared(work.key, work.attempt):
                # Not written in flight yet: the next write names it, then it may start.
                self.held = True
                self.changed()
                return None
            self._backlog.take_first()
            self.records.start(work.key, attempt=work.attempt, index=work.index)
            self.changed()
            return work

    async def upcoming(self, now: float) -> list[tuple[str, int]]:
        """The items to write in flight before they start, with their attempts, when no journal
        notes starts: a crash after the write runs each again with its attempt raised. At most
        the re-run limit, with those running, so a crash re-runs no more than that."""
        if self.rerun_limit is None:
            return []
        room = self.rerun_limit - self.ledger.attempts.active
        while len(self._backlog) < room and await self._pull(now):
            pass
        return self._backlog.upcoming(room)

    async def _pull(self, now: float) -> bool:
        """Bring one more runnable item into the backlog; False if none came now."""
        while True:
            attempts = self.ledger.attempts
            active = [*attempts.in_flight, *attempts.retrying, *self._backlog.keys()]
            try:
                named = await self.intake.take(active, now)
            except SourceError as error:
                self.source_error = str(error)
                self.changed()
                return False
            if named is None:
                return False
            if self._admit(named):
                return True

    def _admit(self, named: Named) -> bool:
        """Record, reject or enqueue an item the source just gave; True when it was enqueued."""
        self.ledger.note_seen(named.index + 1)
        if named.displaced is not None and named.moved_to is not None:
            # A real id came that an earlier made-up key is: that record moves aside.
            self.records.move(named.displaced, named.moved_to)
            self.changed()
        if named.key in self.ledger.recorded:
            return False
        if named.rejection is not None:
            self._reject(named, named.rejection)
            return False
        # An item that may have reached an agent before a restart runs with its attempt
        # raised, when the source gives it again (an HTTP source may not).
        attempt = self.ledger.attempts.next_attempt(named.key)
        pool = route_item(named.value, self.config)
        if isinstance(pool, Rejection):
            self._reject(named, pool)
            return False
        self._backlog.add(Work(named.key, named.index, named.value, pool, attempt=attempt))
        return True

    def _reject(self, named: Named, rejection: Rejection) -> None:
        reason, message = rejection.reason, rejection.message
        self.records.failure(
            named.key, reason=reason, message=message, attempts=0, agent=None, index=named.index
        )
        self.changed()
        self.report.item_failed(named.key, reason, message)
