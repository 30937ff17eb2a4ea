"""A run's progress in memory, and the batched merge patches that make it durable.

The engine tells the :class:`RunLedger` what happens (an item started, succeeded, failed, was
retried); the ledger counts, places each result in status or a result ConfigMap, and builds the
next status patch with only what changed. It also restores itself from a status written before an
operator restart (:func:`agentpool.runs.journaling.replay` adds what the journal holds since),
so recorded items are never run again and items that were in flight run again with ``attempt``
raised (:class:`~agentpool.runs.attempts.Attempts` keeps each item's attempts).
:func:`flush_due` decides when to write: at most once per interval, unless dispatch waits on the
write.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from agentpool.api import PoolRunStatus, RawItemFailure, RawResultRef, RawRunStatus
from agentpool.runs.attempts import Attempts
from agentpool.runs.items import MADE_UP
from agentpool.runs.results import (
    ResultChunks,
    encode,
    output_line,
    place_record,
    record_line,
    record_size,
)
from agentpool.wire.results import iter_results, ref_name


def flush_due(
    *,
    now: float,
    last_write: float | None,
    interval: float,
    held: bool = False,
    held_gap: float = 0.0,
) -> bool:
    """Whether a status write may happen now: the first one at once, then one per interval.

    ``held`` says dispatch waits on this write (the re-run limit is reached and nothing runs):
    then it may go ``held_gap`` after the last. Each such write records the limit's worth of
    items, so there are no more writes than the limit already forces; the run just does not idle.
    """
    if last_write is None:
        return True
    # Compared as the deadline the engine sleeps until, so a wake at it always finds it due.
    return now >= last_write + (min(held_gap, interval) if held else interval)


@dataclass
class Flush:
    """One batch to write: ConfigMaps first (status names them), then the status patch."""

    configmaps: list[tuple[str, dict[str, str]]]
    patch: RawRunStatus


@dataclass
class RunLedger:
    """Counts and records of one run, and the unwritten part of its status."""

    run: str
    replayable: bool
    recorded: set[str] = field(default_factory=set)
    succeeded: int = 0
    failed: int = 0
    seen: int = 0
    """Items the source gave, over the run's whole life: an unreplayable source's next index."""
    attempts: Attempts = field(default_factory=Attempts)
    made_up: dict[str, RawItemFailure] = field(default_factory=dict)
    """Failures of items recorded under a made-up key (no usable id, or a duplicate one)."""
    status_used: int = 0
    chunks: ResultChunks | None = None
    _new_items: dict[str, object] = field(default_factory=dict)
    _new_failures: dict[str, RawItemFailure | None] = field(default_factory=dict)
    _refs_written: list[RawResultRef] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.chunks is None:
            self.chunks = ResultChunks(self.run)

    @classmethod
    def restore(
        cls,
        run: str,
        *,
        replayable: bool,
        status: PoolRunStatus | None,
        configmaps: Mapping[str, Mapping[str, str]] | None = None,
    ) -> RunLedger:
        """The ledger of a run whose status (and result ConfigMaps) were written before."""
        status = status or PoolRunStatus()
        configmaps = configmaps or {}
        refs = [ref.to_raw() for ref in status.result_refs]
        failures = {key: failure.to_raw() for key, failure in status.failures.items()}
        # A ConfigMap named in status but gone costs its items a second run, not the whole run.
        datas = [configmaps.get(ref_name(ref), {}) for ref in refs]
        ledger = cls(
            run=run,
            replayable=replayable,
            chunks=ResultChunks(run, refs=refs, last_data=datas[-1] if datas else None),
        )
        assert ledger.chunks is not None
        ledger._refs_written = [RawResultRef(**ref) for ref in ledger.chunks.refs]
        written = {"items": status.items, "failures": failures, "resultRefs": refs}
        for record in iter_results(written, datas):
            ledger.recorded.add(record["id"])
            if "failure" in record:
                ledger.failed += 1
                if record["failure"].get("reason") in MADE_UP:
                    # Read back as the engine wrote it: a copy of the failure's wire form.
                    ledger.made_up[record["id"]] = cast(RawItemFailure, dict(record["failure"]))
            else:
                ledger.succeeded += 1
        ledger.attempts = Attempts.restore(status, recorded=ledger.recorded)
        ledger.seen = status.total
        for key, output in status.items.items():
            ledger.status_used += record_size(key, output)
        for key, failure_wire in failures.items():
            ledger.status_used += record_size(key, failure_wire)
        return ledger

    def note_seen(self, count: int) -> None:
        """The source has given at least ``count`` items over the run's life."""
        self.seen = max(self.seen, count)

    def start(self, key: str, *, attempt: int) -> None:
        self.attempts.start(key, attempt)

    def record_output(self, key: str, output: Any, *, encoded: str | None = None) -> None:
        """Record an item's output; ``encoded``: it in :func:`encode`'s JSON, when the caller
        has that already."""
        self.attempts.finish(key)
        self.recorded.add(key)
        self.succeeded += 1
        encoded = encode(output) if encoded is None else encoded
        size = len(encoded.encode())
        if place_record(key, output, is_output=True, status_used=self.status_used, size=size):
            self.status_used += record_size(key, output, size=size)
            self._new_items[key] = output
        else:
            assert self.chunks is not None
            self.chunks.add(output_line(key, encoded), is_output=True)

    def record_failure(
        self, key: str, *, reason: str, message: str, attempts: int, agent: str | None
    ) -> None:
        self.attempts.finish(key)
        self.recorded.add(key)
        self.failed += 1
        failure: RawItemFailure = {"reason": reason, "message": message, "attempts": attempts}
        if agent:
            failure["agent"] = agent
        if reason in MADE_UP:
            self.made_up[key] = failure
        self._place_failure(key, failure)

    def move_record(self, key: str, to: str) -> None:
        """Move the record under made-up ``key`` to ``to``: a real item with that id came.

        The item's key is free again until that item is recorded; the count stays.
        """
        failure = self.made_up.pop(key, None)
        if failure is None:
            return
        self.recorded.discard(key)
        if self._new_failures.get(key) is failure:
            del self._new_failures[key]
        else:
            # Written already: a merge patch removes the map key by setting it to null.
            self._new_failures[key] = None
        self.recorded.add(to)
        self.made_up[to] = failure
        self._place_failure(to, failure)

    def _place_failure(self, key: str, failure: RawItemFailure) -> None:
        if place_record(key, failure, is_output=False, status_used=self.status_used):
            self.status_used += record_size(key, failure)
            self._new_failures[key] = failure
        else:
            assert self.chunks is not None
            self.chunks.add(record_line(key, failure=failure), is_output=False)

    def take_flush(self, extra: RawRunStatus, *, declare: Iterable[tuple[str, int]] = ()) -> Flush:
        """The next write: changed ConfigMaps, and a status patch of counts and new records.

        After it is written, only what is in flight now (and ``declare``: items about to start,
        with their attempt) can be lost to a crash.
        """
        assert self.chunks is not None
        configmaps = self.chunks.take_changed()
        patch: RawRunStatus = {"succeeded": self.succeeded, "failed": self.failed}
        patch.update(self.attempts.take_patch(declare))
        if self._new_items:
            patch["items"] = self._new_items
            self._new_items = {}
        if self._new_failures:
            patch["failures"] = self._new_failures
            self._new_failures = {}
        if self.chunks.refs != self._refs_written:
            patch["resultRefs"] = [RawResultRef(**ref) for ref in self.chunks.refs]
            self._refs_written = [RawResultRef(**ref) for ref in self.chunks.refs]
        patch.update(extra)
        return Flush(configmaps=configmaps, patch=patch)
