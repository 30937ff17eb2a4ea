"""A run's journal entries: what each says, its one encoding, and reading them back.

Between two status writes a run's journal (:class:`~agentpool.runs.contracts.Journal`) holds
what happened to its items, one entry a line: an item :class:`Started` an attempt, found no agent
after all (:class:`Unstarted`), was recorded with an :class:`Output` or a :class:`Failure`, or its
made-up key was taken over by a real id and its record :class:`Moved`. :func:`encode_entry` and
:func:`decode_entry` are the only places that know the lines' JSON; :func:`replay` is the only one
that reads entries back, turning a status written before an operator restart and the journal
since into the run's ledger. The engine changes its ledger through :class:`Recorder` alone, which
notes each change in the journal as it makes it, when the run keeps one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from agentpool.api import PoolRunStatus, RawItemFailure
from agentpool.runs.contracts import Journal
from agentpool.runs.results import encode, output_line
from agentpool.runs.status import RunLedger


@dataclass(frozen=True, slots=True)
class Started:
    """``key`` started ``attempt``; ``index``: its place in the source, which an unreplayable
    source does not give again."""

    key: str
    attempt: int
    index: int | None = None


@dataclass(frozen=True, slots=True)
class Unstarted:
    """The attempt ``key`` started found no agent (or one that refused): it never happened."""

    key: str


@dataclass(frozen=True, slots=True)
class Output:
    """``key`` succeeded with ``output``; ``encoded``: that output in :func:`encode`'s JSON,
    when the caller has it already."""

    key: str
    output: Any
    encoded: str | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Failure:
    """``key`` failed for good, after ``attempts`` attempts (0 when no agent saw it)."""

    key: str
    reason: str
    message: str
    attempts: int
    agent: str | None
    index: int | None = None


@dataclass(frozen=True, slots=True)
class Moved:
    """A real item's id is the made-up key ``displaced``: the record under it moved to ``key``."""

    key: str
    displaced: str


Entry = Started | Unstarted | Output | Failure | Moved


class RawEntry(TypedDict, total=False):
    """An entry's JSON line: its ``id``, and the keys that say which entry it is."""

    id: str
    attempt: int
    index: int
    unstarted: bool
    moved: str
    output: Any
    failure: RawItemFailure


def encode_entry(entry: Entry) -> str:
    """The journal line of ``entry``: compact JSON, ``id`` first."""
    if isinstance(entry, Output):
        encoded = encode(entry.output) if entry.encoded is None else entry.encoded
        return output_line(entry.key, encoded)
    raw: RawEntry = {"id": entry.key}
    if isinstance(entry, Moved):
        raw["moved"] = entry.displaced
        return encode(raw)
    if isinstance(entry, Unstarted):
        raw["unstarted"] = True
        return encode(raw)
    if isinstance(entry, Started):
        raw["attempt"] = entry.attempt
    else:
        raw["failure"] = {
            "reason": entry.reason,
            "message": entry.message,
            "attempts": entry.attempts,
            "agent": entry.agent,
        }
    if entry.index is not None:
        raw["index"] = entry.index
    return encode(raw)


def decode_entry(raw: Mapping[str, Any]) -> Entry:
    """The entry a journal line holds (``raw``: its JSON object, with a string ``id``).

    Read as the engine has always read them: an entry that is none of the others is an output.
    """
    key = str(raw["id"])
    index = int(raw["index"]) if "index" in raw else None
    if "moved" in raw:
        return Moved(key=key, displaced=str(raw["moved"]))
    if "attempt" in raw:
        return Started(key=key, attempt=int(raw["attempt"]), index=index)
    if raw.get("unstarted"):
        return Unstarted(key=key)
    failure = raw.get("failure")
    if isinstance(failure, dict):
        return Failure(
            key=key,
            reason=str(failure.get("reason", "")),
            message=str(failure.get("message", "")),
            attempts=int(failure.get("attempts", 0)),
            agent=failure.get("agent"),
            index=index,
        )
    return Output(key=key, output=raw.get("output"))


def replay(
    entries: Iterable[Entry],
    *,
    run: str,
    replayable: bool,
    status: PoolRunStatus | None = None,
    configmaps: Mapping[str, Mapping[str, str]] | None = None,
) -> RunLedger:
    """The ledger of a run as its last status write (and result ConfigMaps) and its journal
    since leave it: what finished after the write, before an operator crash, is recorded; what
    was in flight then runs again with its attempt raised."""
    ledger = RunLedger.restore(run, replayable=replayable, status=status, configmaps=configmaps)
    for entry in entries:
        if isinstance(entry, Moved):
            ledger.move_record(entry.displaced, entry.key)
            continue
        if isinstance(entry, Started | Failure) and entry.index is not None:
            # Items an unreplayable source gave: a resumed run goes on after them.
            ledger.note_seen(entry.index + 1)
        if entry.key in ledger.recorded:
            continue
        match entry:
            case Started(key=key, attempt=attempt):
                # It runs again with the attempt raised, unless it finished further on.
                ledger.attempts.replay_start(key, attempt)
            case Unstarted(key=key):
                ledger.attempts.replay_unstart(key)
            case Failure():
                ledger.record_failure(
                    entry.key,
                    reason=entry.reason,
                    message=entry.message,
                    attempts=entry.attempts,
                    agent=entry.agent,
                )
                ledger.attempts.replay_finish(entry.key)
            case Output(key=key, output=output):
                ledger.record_output(key, output)
                ledger.attempts.replay_finish(key)
    return ledger


class Recorder:
    """Where the engine records what happens to its items: in the ledger, and as one entry in
    the journal when the run keeps one. What it notes reaches the kernel at :meth:`flush`."""

    def __init__(self, ledger: RunLedger, journal: Journal | None) -> None:
        self._ledger = ledger
        self._journal = journal

    def start(self, key: str, *, attempt: int, index: int) -> None:
        """``key`` takes a lane on ``attempt``."""
        self._ledger.start(key, attempt=attempt)
        if self._journal is not None:
            self._journal.append(encode_entry(Started(key=key, attempt=attempt, index=index)))

    def unstart(self, key: str) -> None:
        """The attempt ``key`` started found no agent that would take it: it does not count."""
        self._ledger.attempts.unstart(key)
        if self._journal is not None:
            self._journal.append(encode_entry(Unstarted(key=key)))

    def await_retry(self, key: str) -> None:
        """The attempt ``key`` is on failed and another follows after a back-off. The journal
        needs no entry: after a crash the item resumes with its attempt raised either way."""
        self._ledger.attempts.await_retry(key)

    def output(self, key: str, output: Any, *, encoded: str) -> None:
        """``key`` succeeded; ``encoded``: its output in :func:`encode`'s JSON."""
        self._ledger.record_output(key, output, encoded=encoded)
        if self._journal is not None:
            self._journal.append(encode_entry(Output(key=key, output=output, encoded=encoded)))

    def failure(
        self,
        key: str,
        *,
        reason: str,
        message: str,
        attempts: int,
        agent: str | None,
        index: int | None = None,
    ) -> None:
        """``key`` failed for good; ``index``: its place in the source, when no agent saw it."""
        self._ledger.record_failure(
            key, reason=reason, message=message, attempts=attempts, agent=agent
        )
        if self._journal is not None:
            entry = Failure(key, reason, message, attempts=attempts, agent=agent, index=index)
            self._journal.append(encode_entry(entry))

    def move(self, displaced: str, to: str) -> None:
        """A real item's id is the made-up key ``displaced``: its record moves to ``to``."""
        self._ledger.move_record(displaced, to)
        if self._journal is not None:
            self._journal.append(encode_entry(Moved(key=to, displaced=displaced)))

    def flush(self) -> None:
        """Hand what was noted to the kernel: from here it outlives the operator's process."""
        if self._journal is not None:
            self._journal.flush()

    def discard(self) -> None:
        """The run is over and its status holds everything: the journal goes."""
        if self._journal is not None:
            self._journal.discard()
