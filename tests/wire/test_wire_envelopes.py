"""The envelope every item arrives in: what the agent accepts and what it answers 400 to."""

from __future__ import annotations

import json

import pytest

from agentpool.wire.envelopes import Envelope, parse_envelope


@pytest.mark.parametrize(
    ("raw", "prefer", "expected"),
    [
        (
            b'{"id":"a","item":{"x":1},"input":[2],"attempt":3,"run":"r"}',
            "",
            Envelope(id="a", item={"x": 1}, input=[2], attempt=3, run="r", cast=False),
        ),
        (b'{"id":7,"item":null}', "", Envelope(7, None, None, 1, None, cast=False)),
        (b'{"id":"c","item":1}', "respond-async", Envelope("c", 1, None, 1, None, cast=True)),
        (b'{"id":"c","item":1}', "Respond-Async, wait=5", Envelope("c", 1, None, 1, None, True)),
        (b'{"id":"c","item":1,"mode":"Cast"}', "", Envelope("c", 1, None, 1, None, cast=True)),
    ],
)
def test_valid_envelopes(raw: bytes, prefer: str, expected: Envelope) -> None:
    """Well-formed bodies parse, defaults fill in, and either way of asking for a cast works."""
    assert parse_envelope(raw, prefer=prefer) == expected


@pytest.mark.parametrize(
    ("raw", "complaint"),
    [
        (b"{oops", "not JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "not JSON"),  # deeper than Python's stack goes
        (b"[1, 2]", "JSON object"),
        (b'{"item": 1}', "no 'id'"),
        (b'{"id": true, "item": 1}', "'id' must be"),
        (b'{"id": 1.5, "item": 1}', "'id' must be"),
        (b'{"id": "a"}', "no 'item'"),
        (b'{"id": "a", "item": 1, "attempt": 0}', "'attempt'"),
        (b'{"id": "a", "item": 1, "attempt": "2"}', "'attempt'"),
        (b'{"id": "a", "item": 1, "run": 5}', "'run'"),
        (b'{"id": "a", "item": 1, "mode": "Later"}', "'mode'"),
    ],
)
def test_invalid_envelopes(raw: bytes, complaint: str) -> None:
    """Malformed bodies are refused with a sentence naming what is wrong."""
    result = parse_envelope(raw)
    assert isinstance(result, str)
    assert complaint in result


@pytest.mark.parametrize("cast", [False, True], ids=["call", "cast"])
def test_the_body_the_operator_sends_reads_back_as_its_envelope(cast: bool) -> None:
    """What the operator builds for an attempt is what the agent parses, a cast included when
    the Prefer header asks for it."""
    envelope = Envelope(id="a", item={"n": 1}, input={"k": 2}, attempt=2, run="run", cast=cast)
    body = json.dumps(envelope.body()).encode()
    assert list(envelope.body()) == ["id", "item", "input", "attempt", "run"]
    assert parse_envelope(body, prefer="respond-async" if cast else "") == envelope
