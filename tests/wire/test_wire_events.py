"""A streamed answer's events: what an agent writes is what a caller reads, however the bytes
arrive, and whatever a stream holds it reads to the whole output or to a failure that says why."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentpool.wire import events, protocol
from agentpool.wire.events import Event, EventParser, EventTooLarge, Failed, Whole

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def stream(parts: list[Any], *, end: bytes) -> bytes:
    return b"".join(events.part(value) for value in parts) + end


def split(raw: bytes, cuts: list[int]) -> list[bytes]:
    """``raw`` cut at each offset in ``cuts`` (any, in any order): chunks that rejoin to it."""
    offsets = sorted({0, len(raw), *(cut % (len(raw) + 1) for cut in cuts)})
    return [raw[start:end] for start, end in itertools.pairwise(offsets)]


def parse(chunks: list[bytes]) -> list[Event]:
    return list(events.parse(chunks))


@given(parts=st.lists(JSON_VALUES, max_size=6), cuts=st.lists(st.integers(min_value=0)))
def test_any_parts_split_anywhere_read_back_whole(parts: list[Any], cuts: list[int]) -> None:
    """Whatever the parts and wherever the bytes are cut (mid-line, mid-character), the caller
    reads the same events, and the whole output is the list of the parts."""
    raw = stream(parts, end=events.done({"id": "a"}))
    read = parse(split(raw, cuts))
    assert read == parse([raw])
    assert [event.type for event in read] == ["part"] * len(parts) + ["done"]
    assert events.whole_answer(read) == Whole(output=parts, done={"id": "a"})


@given(
    parts=st.lists(JSON_VALUES, max_size=4),
    line_end=st.sampled_from([b"\r\n", b"\r", b"\n"]),
    cuts=st.lists(st.integers(min_value=0)),
)
def test_every_line_end_of_the_standard_reads_the_same(
    parts: list[Any], line_end: bytes, cuts: list[int]
) -> None:
    """CRLF, CR and LF each end a line, a CRLF cut between its CR and LF included; comments
    between the events change nothing."""
    raw = b":hello\n" + stream(parts, end=events.KEEP_ALIVE + events.error("HandlerError", "x"))
    raw = raw.replace(b"\n", line_end)
    assert parse(split(raw, cuts)) == parse([stream(parts, end=events.error("HandlerError", "x"))])


@given(data=st.text(), cuts=st.lists(st.integers(min_value=0)))
def test_multi_line_data_is_joined_with_line_feeds(data: str, cuts: list[int]) -> None:
    """Data of several lines travels as several ``data:`` lines and is read back joined with
    ``\\n``, whichever line ends it had."""
    expected = "\n".join(data.replace("\r\n", "\n").replace("\r", "\n").split("\n"))
    raw = events.encode("note", data)
    assert parse(split(raw, cuts)) == [Event(type="note", data=expected)]


@given(garbage=st.binary(), cuts=st.lists(st.integers(min_value=0)))
def test_garbage_never_raises_and_is_no_answer(garbage: bytes, cuts: list[int]) -> None:
    """Any bytes at all are read without an exception, split anywhere alike, and a stream of
    them is never an answer that succeeded unless it says ``done``."""
    read = parse(split(garbage, cuts))
    assert read == parse([garbage])
    answer = events.whole_answer(read)
    assert isinstance(answer, Failed) or any(event.type == "done" for event in read)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"data: a\ndata:b\ndata\n\n", [Event("message", "a\nb\n")]),
        (b"event: part\n\n", []),  # no data: nothing is dispatched
        (b"event: part\ndata:\n\n", [Event("part", "")]),
        (b"\xef\xbb\xbfevent: x\ndata: 1\n\n", [Event("x", "1")]),  # a leading BOM is dropped
        (b"event: x\ndata: \xff\n\n", [Event("x", "\ufffd")]),  # not UTF-8: U+FFFD
        (b"id: 7\nretry: 10\nfoo: bar\nevent: x\ndata: 1\n\n", [Event("x", "1")]),
        (b"data: 1\n\nevent: x\ndata: 2\n", [Event("message", "1")]),  # no blank line: no event
        (b"event:  x\ndata:  1\n\n", [Event(" x", " 1")]),  # only one space is dropped
    ],
)
def test_the_standard_read_as_written(raw: bytes, expected: list[Event]) -> None:
    """The standard's corners: defaults, empty data, the BOM, bytes not UTF-8, fields ignored,
    an unfinished event at the end, one leading space dropped."""
    assert parse([raw]) == expected


def test_a_parser_gives_each_event_as_its_chunk_completes_it() -> None:
    """A caller gets the first part as soon as its blank line arrives, before the rest."""
    parser = EventParser()
    assert parser.feed(b"event: part\ndata: 1\n") == []
    assert parser.feed(b"\nevent: pa") == [Event("part", "1")]
    assert parser.feed(b"rt\ndata: 2\n\n") == [Event("part", "2")]


def test_an_unknown_event_type_is_ignored() -> None:
    """Types the protocol does not know (and the standard's default, ``message``) are skipped."""
    raw = b"event: progress\ndata: 50\n\ndata: hi\n\n" + stream([1], end=events.done())
    assert events.whole_answer(parse([raw])) == Whole(output=[1], done={})


def test_a_stream_without_a_terminal_event_lost_its_agent() -> None:
    """Parts and then the end of the stream, or a terminal event cut short: AgentLost."""
    for raw in (stream([1, 2], end=b""), stream([1], end=events.done()[:-1])):
        answer = events.whole_answer(parse([raw]))
        assert isinstance(answer, Failed)
        assert answer.reason == protocol.AGENT_LOST
        assert "lost mid-answer" in answer.message


def test_an_error_event_is_the_items_failure() -> None:
    """The agent's error event gives its reason and message; parts before it are dropped."""
    raw = stream(["a"], end=events.error("HandlerError", "KeyError: 'n'"))
    assert events.whole_answer(parse([raw])) == Failed("HandlerError", "KeyError: 'n'")


@pytest.mark.parametrize(
    ("raw", "complaint"),
    [
        (b"event: part\ndata: {oops\n\n", "'part' event is not JSON"),
        (b"event: part\ndata: NaN\n\n", "'part' event is not JSON"),
        (b"event: done\ndata: [1]\n\n", "'done' event is not a JSON object"),
        (b'event: error\ndata: {"reason": 1}\n\n', "has no 'reason' and 'message'"),
        (b'event: error\ndata: {"message": "m"}\n\n', "has no 'reason' and 'message'"),
    ],
)
def test_a_malformed_event_is_a_bad_response(raw: bytes, complaint: str) -> None:
    """An event of the protocol whose data is not what it says is BadResponse, saying which
    event, why, and where the protocol is written."""
    answer = events.whole_answer(parse([raw]))
    assert isinstance(answer, Failed)
    assert answer.reason == protocol.BAD_RESPONSE
    assert complaint in answer.message
    assert protocol.REFERENCE in answer.message


def test_a_malformed_events_quote_is_short() -> None:
    """A huge malformed part is quoted only in part: the message goes into a run's status."""
    answer = events.whole_answer(parse([b"event: part\ndata: " + b"x" * 100_000 + b"\n\n"]))
    assert isinstance(answer, Failed)
    assert len(answer.message) < 2000


def test_encoded_events_are_one_line_of_json_each() -> None:
    """A part's JSON stays on one line whatever its strings hold; what is not JSON is refused."""
    assert (
        events.part({"t": "a\nb\r\u2028é"})
        == 'event: part\ndata: {"t":"a\\nb\\r\u2028é"}\n\n'.encode()
    )
    assert events.done() == b"event: done\ndata: {}\n\n"
    assert json.loads(events.error("Busy", "m").split(b"data: ")[1]) == {
        "reason": "Busy",
        "message": "m",
    }
    for value in (float("nan"), {1, 2}, object()):
        with pytest.raises((TypeError, ValueError)):
            events.part(value)
    with pytest.raises(ValueError, match="one line"):
        events.encode("a\nb", "x")


@pytest.mark.parametrize(
    ("accept", "wanted"),
    [
        ("text/event-stream", True),
        ("Text/Event-Stream; charset=utf-8", True),
        ("application/json, text/event-stream;q=0.5", True),
        ("text/event-stream;q=0", False),
        ("text/event-stream; q=0.000", False),
        ("application/json", False),
        ("*/*", False),
        ("", False),
    ],
)
def test_which_accept_headers_ask_for_a_stream(accept: str, wanted: bool) -> None:
    """Only a header naming text/event-stream, not refused with q=0, asks for a stream: a
    caller that takes anything gets the JSON answer every caller understands."""
    assert events.wants_stream(accept) is wanted


@given(cuts=st.lists(st.integers(min_value=0)))
def test_an_event_past_the_limit_is_refused_however_it_arrives(cuts: list[int]) -> None:
    """Events within the limit are read, each on its own count; one past it, or a line that
    never ends, raises EventTooLarge before it is held whole, wherever the bytes are cut."""
    within = events.encode("part", "x" * 12) + events.encode("part", "y\n" * 12)
    assert len(list(events.parse(split(within, cuts), limit=20))) == 2
    for past in (events.encode("part", "x" * 21), events.encode("part", "y\n" * 21)):
        with pytest.raises(EventTooLarge):
            list(events.parse(split(within + past, cuts), limit=20))
    endless = b"data: " + b"z" * 50
    with pytest.raises(EventTooLarge, match="more than 20 characters"):
        list(events.parse(split(endless, cuts), limit=20))
