"""Streamed answers of ``POST /invoke``: server-sent events, one per part, then one terminal event.

An agent whose handler makes its output in parts (the words of a model's answer, as they come)
may answer a call that asks with ``Accept: text/event-stream`` part by part, so its caller has
the first part before the last is made. The wire is the server-sent events of the WHATWG HTML
standard: ``event: part`` with the part as JSON in ``data:``, once per part, then exactly one
``event: done`` or ``event: error``; a stream that ends without either lost its agent
mid-answer. The page "Agent protocol" (``docs/reference/protocol.md``, "Streamed answers") is the
contract an agent in any language keeps.

The SDK's server (``agentpool.agent.server``) writes the events with :func:`part`, :func:`done`
and :func:`error`. A caller feeds the bytes it reads, in chunks split anywhere, to
:class:`EventParser`, reads each event with :func:`read_event`, and gets the whole answer with
:func:`whole_answer`: the list of the parts, which is the output the agent answers the same call
without the header. This module imports nothing but the standard library, as the rest of the wire.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from agentpool.wire import protocol

#: The protocol's event types: a part of the output, and the two that end an answer.
PART: Final = "part"
DONE: Final = "done"
ERROR: Final = "error"
#: The type of an event that names none, as the standard reads it; the protocol gives it no
#: meaning, so a caller ignores it as it ignores any type it does not know.
MESSAGE: Final = "message"
#: A comment line, which every reader of the standard ignores. The SDK sends one when no part
#: has come for a while: an idle proxy keeps the connection, and a caller that went away is
#: found by the write that fails.
KEEP_ALIVE: Final = b":\n"
#: How much of a malformed event's data a failure's message quotes: messages go into a run's
#: status and stay short.
QUOTED_CHARS: Final = 200

_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class Event:
    """One event as the standard dispatches it: its type (``message`` when it names none) and
    its ``data`` lines joined with ``\\n``."""

    type: str
    data: str


@dataclass(frozen=True, slots=True)
class Part:
    """One part of the output, as the handler made it."""

    value: Any


@dataclass(frozen=True, slots=True)
class Done:
    """The answer ended well; ``body`` is the ``done`` event's object (the SDK's names the
    item's ``id``)."""

    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Failed:
    """The item failed: a reason of the protocol's, and a sentence for a person."""

    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Whole:
    """A streamed answer read to its ``done``: the output is the list of its parts, as the agent
    answers the same call without ``Accept: text/event-stream``."""

    output: list[Any]
    done: dict[str, Any]


def wants_stream(accept: str) -> bool:
    """Whether an ``Accept`` header's value takes ``text/event-stream`` (not with ``q=0``, which
    refuses it)."""
    for media_range in accept.split(","):
        media_type, *parameters = media_range.split(";")
        if media_type.strip().lower() == protocol.EVENT_STREAM:
            return not any(_refuses(parameter) for parameter in parameters)
    return False


def _refuses(parameter: str) -> bool:
    name, _, value = parameter.partition("=")
    if name.strip().lower() != "q":
        return False
    try:
        return float(value.strip()) == 0.0
    except ValueError:
        return False


def encode(type: str, data: str) -> bytes:
    """One event: its type, each line of ``data`` on a ``data:`` line of its own, and the blank
    line that dispatches it."""
    if _LINE_END.search(type):
        raise ValueError(f"an event's type is one line, not {type!r}")
    lines = [f"event: {type}", *(f"data: {line}" for line in _LINE_END.split(data))]
    return ("\n".join(lines) + "\n\n").encode()


def part(value: Any) -> bytes:
    """``value`` as one ``part`` event; ``ValueError`` or ``TypeError`` when it is not JSON."""
    return encode(PART, _dumps(value))


def done(body: Mapping[str, Any] | None = None) -> bytes:
    """The ``done`` event that ends an answer well, its data the object ``body`` (``{}`` when
    None: an event with no data would not be dispatched at all)."""
    return encode(DONE, _dumps(dict(body or {})))


def error(reason: str, message: str) -> bytes:
    """The ``error`` event that ends an answer as a failure, as an error body says it."""
    return encode(ERROR, _dumps({"reason": reason, "message": message}))


def _dumps(value: Any) -> str:
    # Compact, so one line; unescaped UTF-8, since the words of most languages would triple in
    # size as escapes. A line break inside a JSON string is always escaped.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class EventTooLarge(ValueError):
    """An event being read holds more characters than the parser's limit: the stream is cut
    there, before a part past any output's size (or a line that never ends) fills the caller's
    memory."""


class EventParser:
    """Server-sent events from the bytes of a stream, fed in chunks split anywhere: mid-line,
    mid-character, between a line's CR and LF.

    It reads as the standard does: UTF-8, a byte that is none read as U+FFFD, one leading
    byte-order mark dropped; CRLF, LF or CR end a line; a line starting ``:`` is a comment; a
    field's value loses one leading space; ``data`` lines are joined with ``\\n``; a blank line
    dispatches the event, which dispatches nothing if it has no data; ``id``, ``retry`` and any
    other field are ignored. What follows the last blank line when the stream ends is never an
    event. No input makes it raise, but for :class:`EventTooLarge` once the event being read
    holds more than ``limit`` characters: the values of its data lines, and the line not yet
    ended, field name and all.
    """

    def __init__(self, *, limit: int | None = None) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._limit = limit
        self._started = False
        self._after_cr = False
        self._line: list[str] = []
        self._type = ""
        self._data: list[str] = []
        # Characters of the event being read: its data lines and the line not yet ended.
        self._held = 0

    def feed(self, chunk: bytes) -> list[Event]:
        """The events that ``chunk`` completes, in order."""
        text = self._decoder.decode(chunk)
        if not text:
            return []
        start = 0
        if not self._started:
            self._started = True
            start = 1 if text.startswith("\ufeff") else 0
        if self._after_cr and text.startswith("\n", start):
            start += 1  # the LF of a CRLF whose CR ended the previous chunk
        self._after_cr = text.endswith("\r")
        events: list[Event] = []
        for end in _LINE_END.finditer(text, start):
            self._hold(text[start : end.start()])
            line = "".join(self._line)
            self._line.clear()
            self._held -= len(line)
            start = end.end()
            event = self._take(line)
            if event is not None:
                events.append(event)
        self._hold(text[start:])
        return events

    def _hold(self, piece: str) -> None:
        self._line.append(piece)
        self._held += len(piece)
        if self._limit is not None and self._held > self._limit:
            raise EventTooLarge(f"an event of the stream holds more than {self._limit} characters")

    def _take(self, line: str) -> Event | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._type = value
        elif name == "data":
            self._data.append(value)
            self._held += len(value)
        return None

    def _dispatch(self) -> Event | None:
        data, self._data = self._data, []
        self._held = 0
        type, self._type = self._type, ""
        if not data:
            return None
        return Event(type=type or MESSAGE, data="\n".join(data))


def parse(chunks: Iterable[bytes], *, limit: int | None = None) -> Iterator[Event]:
    """The events of a stream read in ``chunks``, each as soon as its chunk completes it; past
    ``limit`` characters in one event, :class:`EventTooLarge`."""
    parser = EventParser(limit=limit)
    for chunk in chunks:
        yield from parser.feed(chunk)


def read_event(event: Event) -> Part | Done | Failed | None:
    """What ``event`` says in the protocol; None for a type it gives no meaning, which the
    caller ignores. A ``part``, ``done`` or ``error`` whose data is not what the protocol puts
    there is a ``BadResponse`` failure whose message says why and quotes the data."""
    if event.type not in (PART, DONE, ERROR):
        return None
    try:
        value = json.loads(event.data, parse_constant=_not_json)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested past the stack
        return _outside(event, f"is not JSON ({exc})")
    if event.type == PART:
        return Part(value)
    if not isinstance(value, dict):
        return _outside(event, "is not a JSON object")
    if event.type == DONE:
        return Done(value)
    reason, message = value.get("reason"), value.get("message")
    if not isinstance(reason, str) or not reason or not isinstance(message, str):
        return _outside(event, "has no 'reason' and 'message' strings")
    return Failed(reason, message)


def whole_answer(events: Iterable[Event]) -> Whole | Failed:
    """The answer that ``events`` make: the list of the parts once ``done`` comes, or the
    failure an ``error`` event or a malformed event says. Nothing after the first of them is
    read. A stream that ends before either lost its agent mid-answer: ``AgentLost``."""
    parts: list[Any] = []
    for event in events:
        said = read_event(event)
        if isinstance(said, Part):
            parts.append(said.value)
        elif isinstance(said, Done):
            return Whole(output=parts, done=said.body)
        elif isinstance(said, Failed):
            return said
    return Failed(
        protocol.AGENT_LOST,
        f"the agent's streamed answer ended after {len(parts)} part(s) with no 'done' or"
        " 'error' event: the agent was lost mid-answer",
    )


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _outside(event: Event, why: str) -> Failed:
    quoted = event.data[:QUOTED_CHARS]
    return Failed(
        protocol.BAD_RESPONSE,
        f"the agent's streamed answer is outside the protocol (see the agent protocol:"
        f" {protocol.REFERENCE}): the data of its '{event.type}' event {why}: {quoted!r}",
    )
