"""A run's journal entries: each reads back as it was written, and replaying them restores the run.

Table tests of the pure part of journaling: :func:`encode_entry` and :func:`decode_entry` agree
with each other and with the lines earlier operators wrote, and :func:`replay` turns a status and
the journal since into the ledger a resumed run starts from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from runfakes import stored

from agentpool.io.journal import FileJournal
from agentpool.runs.journaling import (
    Entry,
    Failure,
    Moved,
    Output,
    Recorder,
    Started,
    Unstarted,
    decode_entry,
    encode_entry,
    replay,
)
from agentpool.runs.status import RunLedger

LINES: list[tuple[Entry, str]] = [
    (Started("a", attempt=1, index=0), '{"id":"a","attempt":1,"index":0}'),
    (Started("a", attempt=2), '{"id":"a","attempt":2}'),
    (Unstarted("a"), '{"id":"a","unstarted":true}'),
    (Output("a", {"n": 1}), '{"id":"a","output":{"n":1}}'),
    (Output("a", None), '{"id":"a","output":null}'),
    (
        Failure("a", reason="AgentError", message="no", attempts=3, agent="pod-1"),
        '{"id":"a","failure":{"reason":"AgentError","message":"no","attempts":3,"agent":"pod-1"}}',
    ),
    (
        Failure("[4]", reason="MissingId", message="none", attempts=0, agent=None, index=4),
        '{"id":"[4]","failure":{"reason":"MissingId","message":"none","attempts":0,"agent":null},'
        '"index":4}',
    ),
    (Moved("[38][2]", displaced="[38]"), '{"id":"[38][2]","moved":"[38]"}'),
]


@pytest.mark.parametrize(("entry", "line"), LINES, ids=[line for _, line in LINES])
def test_an_entry_is_written_as_one_line_and_read_back_as_itself(entry: Entry, line: str) -> None:
    """Each kind of entry has one line, and that line decodes to the same entry."""
    assert encode_entry(entry) == line
    assert decode_entry(json.loads(line)) == entry


def test_an_output_encoded_already_is_written_as_given() -> None:
    """The engine encodes an output once, for the size cap and the journal alike."""
    assert encode_entry(Output("a", {"n": 1}, encoded='{"n": 1}')) == '{"id":"a","output":{"n": 1}}'


def restored(ledger: RunLedger) -> dict[str, Any]:
    """What a resumed run starts from, as a table row compares it."""
    return {
        "recorded": ledger.recorded,
        "succeeded": ledger.succeeded,
        "failed": ledger.failed,
        "seen": ledger.seen,
        "resumed": ledger.attempts.resumed,
        "retries": ledger.attempts.retries,
    }


NOTHING = {"succeeded": 0, "failed": 0, "seen": 0, "resumed": {}, "retries": 0}
MISSING = Failure("[0]", reason="MissingId", message="none", attempts=0, agent=None, index=0)

REPLAYS: list[tuple[str, dict[str, Any], list[Entry], dict[str, Any]]] = [
    ("an empty journal", {}, [], {**NOTHING, "recorded": set()}),
    (
        "a start resumes with its attempt",
        {},
        [Started("a", attempt=1, index=2)],
        {**NOTHING, "recorded": set(), "seen": 3, "resumed": {"a": 1}},
    ),
    (
        "an output after its start is recorded, not resumed",
        {},
        [Started("a", attempt=1, index=0), Output("a", 1)],
        {**NOTHING, "recorded": {"a"}, "succeeded": 1, "seen": 1},
    ),
    (
        "a start that found no agent never happened",
        {},
        [Started("a", attempt=1), Unstarted("a")],
        {**NOTHING, "recorded": set()},
    ),
    (
        "a retry started after the last write counts",
        {"inFlight": {"a": 1}, "retries": 0},
        [Started("a", attempt=2)],
        {**NOTHING, "recorded": set(), "resumed": {"a": 2}, "retries": 1},
    ),
    (
        "an item recorded in status is not recorded again",
        {"items": {"a": 1}, "succeeded": 1},
        [Started("a", attempt=1), Output("a", 2)],
        {**NOTHING, "recorded": {"a"}, "succeeded": 1},
    ),
    (
        "only the first record of an item counts",
        {},
        [Output("a", 1), Failure("a", reason="AgentError", message="no", attempts=1, agent="p")],
        {**NOTHING, "recorded": {"a"}, "succeeded": 1},
    ),
    (
        "a failure counts, and its index moves the source on",
        {},
        [MISSING],
        {**NOTHING, "recorded": {"[0]"}, "failed": 1, "seen": 1},
    ),
    (
        "a made-up record moves aside for the real id",
        {},
        [MISSING, Moved("[0][2]", displaced="[0]"), Output("[0]", 1)],
        {**NOTHING, "recorded": {"[0]", "[0][2]"}, "succeeded": 1, "failed": 1, "seen": 1},
    ),
    (
        "a move of a key that is not made up changes nothing",
        {"items": {"a": 1}, "succeeded": 1},
        [Moved("b", displaced="a")],
        {**NOTHING, "recorded": {"a"}, "succeeded": 1},
    ),
]


@pytest.mark.parametrize(
    ("status", "entries", "expected"),
    [row[1:] for row in REPLAYS],
    ids=[row[0] for row in REPLAYS],
)
def test_replay_restores_what_a_status_and_the_journal_since_say(
    status: dict[str, Any], entries: list[Entry], expected: dict[str, Any]
) -> None:
    """Replaying a journal over the status written before it gives the ledger a resumed run
    starts from: records, counts, the source's next index and the attempts to resume."""
    ledger = replay(entries, run="run", replayable=True, status=stored(status))
    assert restored(ledger) == expected


def test_replay_leaves_its_inputs_alone() -> None:
    """Replay is a function of its inputs: the status it reads is not changed."""
    status = {"items": {"a": 1}, "succeeded": 1, "inFlight": {"b": 1}}
    before = json.dumps(status, sort_keys=True)
    replay([Output("b", 2)], run="run", replayable=True, status=stored(status))
    assert json.dumps(status, sort_keys=True) == before


def test_what_a_recorder_notes_replays_to_the_ledger_it_kept(tmp_path: Path) -> None:
    """Everything the engine records goes to its ledger and its journal alike: replaying the
    journal gives the same records and counts."""
    ledger = RunLedger(run="run", replayable=False)
    journal = FileJournal(tmp_path / "run")
    recorder = Recorder(ledger, journal)
    recorder.start("a", attempt=1, index=0)
    recorder.output("a", {"n": 1}, encoded='{"n":1}')
    recorder.failure("[1]", reason="MissingId", message="none", attempts=0, agent=None, index=1)
    recorder.move("[1]", "[1][2]")
    recorder.start("[1]", attempt=1, index=2)
    recorder.start("c", attempt=1, index=3)
    recorder.unstart("c")
    ledger.note_seen(4)
    recorder.flush()
    again = replay(
        [decode_entry(raw) for raw in FileJournal(tmp_path / "run").load()],
        run="run",
        replayable=False,
    )
    assert restored(again) == {**restored(ledger), "resumed": {"[1]": 1}}


def test_a_recorder_without_a_journal_keeps_the_ledger_only() -> None:
    """A run with no state directory records in its ledger alone."""
    ledger = RunLedger(run="run", replayable=True)
    recorder = Recorder(ledger, None)
    recorder.start("a", attempt=1, index=0)
    recorder.output("a", 1, encoded="1")
    recorder.flush()
    recorder.discard()
    assert (ledger.recorded, ledger.succeeded) == ({"a"}, 1)
