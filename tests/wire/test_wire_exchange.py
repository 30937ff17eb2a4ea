"""A forwarded request goes to a plain HTTP agent over the lean transport as its caller sent it:
the body streamed (sized or chunked), the answer read as it comes, the connection kept only when
both ended whole."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from agentpool.wire.connections import ClosedUnanswered, WirePool

TIMEOUT = 10.0


class Recorder:
    """An aiohttp server that records each request as it reached it and answers by path."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, str], bytes]] = []
        self.peers: set[int] = set()
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read() if request.path != "/refuse" else b""
        assert request.transport is not None
        self.peers.add(request.transport.get_extra_info("peername")[1])
        self.seen.append((request.method, request.path_qs, dict(request.headers), body))
        if request.path == "/refuse":
            return web.Response(status=413, text="too large")
        if request.path == "/stream":
            answer = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await answer.prepare(request)
            for n in range(3):
                await answer.write(b"data: %d\n\n" % n)
            await answer.write_eof()
            return answer
        return web.Response(body=body or b"empty", headers={"X-Seen": request.method})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = self.runner.addresses[0][1]


@pytest.fixture
async def recorder() -> AsyncIterator[Recorder]:
    server = Recorder()
    await server.start()
    yield server
    assert server.runner is not None
    await server.runner.cleanup()


def head(method: str, target: str, *headers: str) -> bytes:
    return ("\r\n".join([f"{method} {target} HTTP/1.1", "Host: agent", *headers]) + "\r\n").encode()


async def pieces(*chunks: bytes) -> AsyncIterator[bytes]:
    for chunk in chunks:
        await asyncio.sleep(0)
        yield chunk


async def exchange(
    wire: WirePool,
    port: int,
    request: bytes,
    body: bytes | AsyncIterator[bytes] | None,
    **kw: bool,
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    async with wire.exchange(
        "127.0.0.1",
        port,
        request,
        body,
        sized=kw.get("sized", False),
        timeout=TIMEOUT,
        bodiless=kw.get("bodiless", False),
        idempotent=kw.get("idempotent", False),
    ) as answer:
        return answer.status, answer.headers, b"".join([p async for p in answer.pieces])


async def test_a_chunked_body_arrives_whole_with_the_callers_headers_and_nothing_added(
    recorder: Recorder,
) -> None:
    wire = WirePool()
    status, headers, body = await exchange(
        wire,
        recorder.port,
        head("POST", "/v1/chat?x=1", "Content-Type: application/json", "X-Trace: a b"),
        pieces(b'{"a":', b" 1", b"}"),
    )
    assert (status, body) == (200, b'{"a": 1}')
    assert (b"X-Seen", b"POST") in headers
    method, target, sent, got = recorder.seen[0]
    assert (method, target, got) == ("POST", "/v1/chat?x=1", b'{"a": 1}')
    assert sent["X-Trace"] == "a b"
    assert sent["Transfer-Encoding"] == "chunked"
    assert set(sent) == {"Host", "Content-Type", "X-Trace", "Transfer-Encoding"}
    # Both ended whole: the next request goes over the same connection.
    await exchange(wire, recorder.port, head("GET", "/again"), None)
    assert wire.kept == 1
    assert len(recorder.peers) == 1
    wire.close()


async def test_a_sized_body_goes_as_sized_and_a_head_answer_has_no_body(recorder: Recorder) -> None:
    wire = WirePool()
    status, _, body = await exchange(
        wire,
        recorder.port,
        head("PUT", "/x", "Content-Length: 5"),
        pieces(b"he", b"llo"),
        sized=True,
    )
    assert (status, body) == (200, b"hello")
    assert "Transfer-Encoding" not in recorder.seen[0][2]
    # The answer to HEAD says its length but carries nothing: waiting for it would stall.
    status, headers, body = await exchange(
        wire, recorder.port, head("HEAD", "/x"), None, bodiless=True
    )
    assert (status, body) == (200, b"")
    assert any(name.lower() == b"content-length" for name, _ in headers)
    assert wire.kept == 1
    assert len(recorder.peers) == 1
    wire.close()


async def test_a_streamed_answer_comes_in_its_pieces(recorder: Recorder) -> None:
    wire = WirePool()
    async with wire.exchange(
        "127.0.0.1", recorder.port, head("GET", "/stream"), None, sized=False, timeout=TIMEOUT
    ) as answer:
        got = [piece async for piece in answer.pieces]
    assert b"".join(got) == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
    assert wire.kept == 1
    wire.close()


async def test_an_answer_left_early_or_given_before_the_body_ended_keeps_no_connection(
    recorder: Recorder,
) -> None:
    wire = WirePool()
    async with wire.exchange(
        "127.0.0.1", recorder.port, head("GET", "/stream"), None, sized=False, timeout=TIMEOUT
    ) as answer:
        assert answer.status == 200
    assert wire.kept == 0

    never_ends = asyncio.Event()

    async def endless() -> AsyncIterator[bytes]:
        yield b"first"
        await never_ends.wait()

    status, _, body = await exchange(wire, recorder.port, head("POST", "/refuse"), endless())
    assert (status, body) == (413, b"too large")
    assert wire.kept == 0
    wire.close()


async def test_interim_answers_are_read_past_and_a_broken_body_fails_the_exchange() -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n")
        writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    wire = WirePool()
    status, headers, body = await exchange(wire, port, head("GET", "/"), None)
    assert (status, headers, body) == (201, [(b"Content-Length", b"2")], b"ok")

    async def broken() -> AsyncIterator[bytes]:
        yield b"part"
        raise ConnectionError("the caller went away")

    gone = asyncio.Event()

    async def read_on(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        writer.close()
        await writer.wait_closed()
        gone.set()

    silent = await asyncio.start_server(read_on, "127.0.0.1", 0)
    with pytest.raises(ConnectionError, match="the caller went away"):
        await exchange(wire, silent.sockets[0].getsockname()[1], head("POST", "/"), broken())
    wire.close()
    await asyncio.wait_for(gone.wait(), TIMEOUT)  # the gateway's side closed when the body broke
    for each in (server, silent):
        each.close()
        await each.wait_closed()


class ClosingServer:
    """Answers the first request on each connection, then closes the connection as the next
    one arrives, unanswered: an agent's keep-alive ending as the gateway takes the connection."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.server: asyncio.Server | None = None
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served = 0
        while not served:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            self.bodies.append(await reader.readexactly(length))
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            served += 1
        with contextlib.suppress(asyncio.IncompleteReadError):
            await reader.readuntil(b"\r\n\r\n")  # the next request, left unanswered
        writer.close()
        await writer.wait_closed()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]


async def test_a_request_that_meets_a_kept_connection_closing_goes_again_once_when_it_may() -> None:
    """RFC 9112 9.3.1: an idempotent request whose kept connection closed unanswered may go
    again on a new one; a POST may not (the agent may have acted on it)."""
    closing = ClosingServer()
    await closing.start()
    wire = WirePool()

    async def put(body: bytes, *, idempotent: bool = True, method: str = "PUT") -> bytes:
        request = head(method, "/", f"Content-Length: {len(body)}")
        half = len(body) // 2
        answer = await exchange(
            wire,
            closing.port,
            request,
            pieces(body[:half], body[half:]),
            sized=True,
            idempotent=idempotent,
        )
        return answer[2]

    assert await put(b"first") == b"ok"
    assert wire.kept == 1
    # The kept connection is closed unanswered: the request, kept whole, goes on a new one.
    assert await put(b"second") == b"ok"
    assert closing.bodies == [b"first", b"second"]
    # A POST on a kept connection closed unanswered fails: the agent may have acted on it.
    with pytest.raises(ClosedUnanswered):
        await put(b"post", idempotent=False, method="POST")
    assert await put(b"third") == b"ok"  # on a new connection, kept after
    # A body too large to keep cannot go again either.
    with pytest.raises(ClosedUnanswered):
        await put(b"x" * 70_000)
    assert closing.bodies == [b"first", b"second", b"third"]
    wire.close()
    assert closing.server is not None
    closing.server.close()
    await closing.server.wait_closed()


async def test_a_body_whole_at_hand_goes_with_its_head_sized_or_chunked(recorder: Recorder) -> None:
    wire = WirePool()
    sized = head("PATCH", "/w", "Content-Length: 4")
    assert (await exchange(wire, recorder.port, sized, b"abcd", sized=True))[2] == b"abcd"
    assert (await exchange(wire, recorder.port, head("POST", "/w"), b"efg"))[2] == b"efg"
    assert (await exchange(wire, recorder.port, head("POST", "/w"), b""))[2] == b"empty"
    assert [(m, body) for m, _, _, body in recorder.seen] == [
        ("PATCH", b"abcd"),
        ("POST", b"efg"),
        ("POST", b""),
    ]
    assert "Transfer-Encoding" not in recorder.seen[0][2]
    assert recorder.seen[1][2]["Transfer-Encoding"] == "chunked"
    assert wire.kept == 1
    assert len(recorder.peers) == 1
    wire.close()


async def test_a_304_with_a_length_has_no_body_and_an_answer_ended_by_close_keeps_nothing() -> None:
    """RFC 9112 6.3: a 304 says the length of what it stands for and carries none of it; an
    answer without a length or chunks ends with its connection, which then cannot be kept."""
    served: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError):
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                served.append(request.split(b" ")[1])
                if request.startswith(b"GET /cached"):
                    writer.write(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 1234\r\n\r\n")
                else:
                    writer.write(b"HTTP/1.1 200 OK\r\n\r\nuntil the end")
                    break
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    wire = WirePool()
    assert (await exchange(wire, port, head("GET", "/cached"), None))[::2] == (304, b"")
    assert wire.kept == 1
    assert (await exchange(wire, port, head("GET", "/open"), None))[::2] == (200, b"until the end")
    assert served == [b"/cached", b"/open"]
    assert wire.kept == 0
    wire.close()
    server.close()
    await server.wait_closed()
