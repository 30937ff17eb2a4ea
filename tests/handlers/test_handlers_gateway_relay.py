"""A native call's streamed answer as the gateway passes it on: every byte as the agent sent it,
its end read from the agent's own ``done`` or ``error`` event (which the caller then has, so the
gateway adds none), and an event past the limit cut off rather than held."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import pytest

from agentpool.handlers.gateway import _relay, _Relayed
from agentpool.wire import events
from agentpool.wire.events import Done, Failed


class Sink:
    def __init__(self) -> None:
        self.sent = b""
        self.started = True
        self.gone = False

    def start(self, status: int, headers: Iterable[tuple[bytes, bytes]], *, agent: str) -> None:
        raise AssertionError("started by the gateway, not the relay")

    async def write(self, data: bytes) -> None:
        self.sent += data

    def end(self) -> None:
        raise AssertionError("ended by the gateway, not the relay")


async def pieces(*chunks: bytes) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


@pytest.mark.parametrize(
    ("stream", "ending", "told"),
    [
        (
            events.part("a") + events.part({"b": 1}) + events.done({"id": "1"}),
            Done({"id": "1"}),
            False,
        ),
        (
            events.part("a") + events.error("HandlerError", "broke"),
            Failed("HandlerError", "broke"),
            True,
        ),
        (events.part("a") + events.part("b"), None, False),
    ],
)
async def test_the_answer_passes_on_whole_and_its_end_is_read(
    stream: bytes, ending: Done | Failed | None, told: bool
) -> None:
    sink, relayed = Sink(), _Relayed()
    # Split anywhere: the end is read across pieces.
    await _relay(pieces(stream[:7], stream[7:19], stream[19:]), sink, relayed, limit=1 << 20)
    assert sink.sent == stream
    assert (relayed.ending, relayed.told, relayed.cut) == (ending, told, False)


async def test_an_event_past_the_limit_is_cut_off() -> None:
    sink, relayed = Sink(), _Relayed()
    huge = b"event: part\ndata: " + b"x" * 5000
    await _relay(pieces(events.part("a"), huge), sink, relayed, limit=1000)
    assert relayed.cut
    assert isinstance(relayed.ending, Failed)
    assert relayed.ending.reason == "BadResponse"
    assert sink.sent == events.part("a")
