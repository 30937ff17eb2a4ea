"""The gateway's HTTP/1.1 as clients speak it: sized and chunked bodies, Expect, kept-alive and
closed connections, requests one after another, heads and bodies past their limits, garbage,
and a caller that goes away mid-request."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentpool.gateway.http import HEAD_LIMIT, HttpServer, Request, Response, error_body

LIMIT = 1024


class Echo:
    """A handler that answers with what it read; one path waits until told, to be cancelled."""

    def __init__(self) -> None:
        self.seen: list[Request] = []
        self.cancelled = asyncio.Event()
        self.waiting = asyncio.Event()

    async def __call__(self, request: Request) -> Response:
        self.seen.append(request)
        if request.path == "/wait":
            self.waiting.set()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        if request.path == "/boom":
            raise RuntimeError("the handler broke")
        return Response(200, request.method.encode() + b" " + request.body)


@pytest.fixture
async def served() -> AsyncIterator[tuple[Echo, int]]:
    echo = Echo()
    server = HttpServer(
        echo,
        body_limit=LIMIT,
        too_large=lambda: Response(413, error_body("TooLarge", "too large")),
        tls=None,
    )
    port = await server.start("127.0.0.1", 0)
    yield echo, port
    await server.stop()


async def exchange(port: int, data: bytes, *, answers: int = 1) -> list[tuple[int, bytes]]:
    """Send ``data``, read ``answers`` answers (status, body), and close."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        return [await read_answer(reader) for _ in range(answers)]
    finally:
        writer.close()


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    async with asyncio.timeout(10):
        head = await reader.readuntil(b"\r\n\r\n")
        if head.startswith(b"HTTP/1.1 100"):
            head = await reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length = next(
            int(line.split(b":")[1]) for line in lines if line.lower().startswith(b"content-length")
        )
        return int(lines[0].split()[1]), await reader.readexactly(length)


def post(path: str, body: bytes, *extra: str) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: x", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def test_requests_one_after_another_on_a_kept_connection(served: tuple[Echo, int]) -> None:
    """Three requests sent at once on one connection are answered in order, each with its own
    body; the query is no part of the path."""
    echo, port = served
    data = post("/a?x=1", b"one") + post("/b", b"two") + post("/c", b"")
    answers = await exchange(port, data, answers=3)
    assert answers == [(200, b"POST one"), (200, b"POST two"), (200, b"POST ")]
    assert [r.path for r in echo.seen] == ["/a", "/b", "/c"]


async def test_a_chunked_body_and_expect_continue(served: tuple[Echo, int]) -> None:
    """A chunked body is read whole; a client that asks to continue is told to."""
    _, port = served
    chunked = (
        b"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    )
    assert await exchange(port, chunked) == [(200, b"POST abcde")]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /y HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"
    )
    async with asyncio.timeout(10):
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 100 Continue")
    writer.write(b"ok")
    assert await read_answer(reader) == (200, b"POST ok")
    writer.close()


@pytest.mark.parametrize(
    "request_bytes",
    [
        post("/x", b"x" * (LIMIT + 1)),
        b"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"400\r\n"
        + b"x" * 1024
        + b"\r\n"
        + b"1\r\nx\r\n0\r\n\r\n",
    ],
)
async def test_a_body_past_the_limit_is_413_and_never_handled(
    served: tuple[Echo, int], request_bytes: bytes
) -> None:
    """Sized or chunked, a body over the limit is answered 413 and the connection closed; the
    handler never sees it."""
    echo, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request_bytes)
    assert (await read_answer(reader))[0] == 413
    async with asyncio.timeout(10):
        assert await reader.read() == b""
    writer.close()
    assert echo.seen == []


async def test_garbage_and_a_huge_head_are_refused(served: tuple[Echo, int]) -> None:
    """Bytes that are not HTTP get 400 and a head past its limit 431, then the connection
    closes."""
    _, port = served
    (garbage,) = await exchange(port, b"\x16\x03\x01 hello\r\n\r\n")
    assert garbage[0] == 400
    huge = b"POST /x HTTP/1.1\r\nHost: x\r\nX-Filler: " + b"a" * (HEAD_LIMIT + 1) + b"\r\n\r\n"
    (answer,) = await exchange(port, huge)
    assert answer[0] == 431


async def test_connection_close_and_http_1_0_close_after_the_answer(
    served: tuple[Echo, int],
) -> None:
    """A request that asks to close, or speaks HTTP/1.0, gets its answer and then the end."""
    _, port = served
    for data in (
        post("/x", b"a", "Connection: close"),
        b"POST /x HTTP/1.0\r\nContent-Length: 1\r\n\r\na",
    ):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(data)
        assert await read_answer(reader) == (200, b"POST a")
        async with asyncio.timeout(10):
            assert await reader.read() == b""
        writer.close()


async def test_a_caller_gone_mid_request_cancels_its_handler(served: tuple[Echo, int]) -> None:
    """Closing the connection while the handler works cancels it at once."""
    echo, port = served
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post("/wait", b""))
    async with asyncio.timeout(10):
        await echo.waiting.wait()
    writer.close()
    async with asyncio.timeout(10):
        await echo.cancelled.wait()


async def test_a_handler_that_breaks_is_a_500_and_the_server_goes_on(
    served: tuple[Echo, int],
) -> None:
    """An unexpected error in the handler answers 500 with a reason; the next request is served."""
    _, port = served
    answers = await exchange(port, post("/boom", b"") + post("/x", b"after"), answers=2)
    assert answers[0][0] == 500
    assert b"InternalError" in answers[0][1]
    assert answers[1] == (200, b"POST after")


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300))
async def test_any_bytes_are_answered_or_closed_never_hang(data: bytes) -> None:
    """Whatever bytes arrive, the server answers or closes within its time, and keeps serving."""
    echo = Echo()
    server = HttpServer(echo, body_limit=LIMIT, too_large=lambda: Response(413, b""), tls=None)
    port = await server.start("127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(data)
        writer.write_eof()
        async with asyncio.timeout(10):
            rest = await reader.read()
        assert rest == b"" or rest.startswith(b"HTTP/1.1 ")
        writer.close()
        assert await exchange(port, post("/x", b"still")) == [(200, b"POST still")]
    finally:
        await server.stop()


async def test_idle_and_slow_connections_are_closed() -> None:
    """A kept connection left idle, and a request that never finishes arriving, are closed once
    their time is up."""
    echo = Echo()
    server = HttpServer(
        echo,
        body_limit=LIMIT,
        too_large=lambda: Response(413, b""),
        tls=None,
        idle_seconds=0.3,
        request_seconds=0.3,
        sweep_seconds=0.05,
    )
    port = await server.start("127.0.0.1", 0)
    try:
        idle_reader, idle = await asyncio.open_connection("127.0.0.1", port)
        slow_reader, slow = await asyncio.open_connection("127.0.0.1", port)
        slow.write(b"POST /x HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc")
        async with asyncio.timeout(10):
            assert await idle_reader.read() == b""
            assert await slow_reader.read() == b""
        for writer in (idle, slow):
            writer.close()
        assert echo.seen == []
    finally:
        await server.stop()


async def not_taken(port: int) -> bool:
    """Whether a new connection is refused, or ended unanswered: accepted as the listener
    closed, it is reset."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except (ConnectionRefusedError, ConnectionResetError):
        return True
    try:
        writer.write(post("/new", b""))
        async with asyncio.timeout(10):
            return await reader.read() == b""
    except ConnectionResetError:
        return True
    finally:
        writer.close()


async def test_a_draining_server_ends_what_it_serves_and_takes_nothing_new() -> None:
    """Draining (an operator stopping), the server takes no new connection, but the request it
    is serving gets its answer, and one sent on a kept connection meanwhile is still handed to
    the handler (whose answer, the gateway's, says to send it again): each answer says the
    connection ends, and the drain ends once they have gone."""
    release = asyncio.Event()
    waiting = asyncio.Event()
    draining_seen: list[bool] = []

    async def handler(request: Request) -> Response:
        draining_seen.append(server.draining)
        if request.path == "/slow":
            waiting.set()
            await release.wait()
        return Response(200, b"done " + request.path.encode())

    server = HttpServer(handler, body_limit=LIMIT, too_large=lambda: Response(413, b""), tls=None)
    port = await server.start("127.0.0.1", 0)
    try:
        kept_reader, kept = await asyncio.open_connection("127.0.0.1", port)
        kept.write(post("/first", b""))
        assert await read_answer(kept_reader) == (200, b"done /first")
        slow_reader, slow = await asyncio.open_connection("127.0.0.1", port)
        slow.write(post("/slow", b""))
        async with asyncio.timeout(10):
            await waiting.wait()
        draining = asyncio.create_task(server.drain(60, linger=60))
        assert await not_taken(port)
        kept.write(post("/late", b""))
        async with asyncio.timeout(10):
            head = await kept_reader.readuntil(b"\r\n\r\n")
            assert b"Connection: close" in head
            assert await kept_reader.read() == b"done /late"
        assert draining_seen == [False, False, True]
        assert not draining.done()
        release.set()
        async with asyncio.timeout(10):
            head = await slow_reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200")
            assert b"Connection: close" in head
            assert await slow_reader.read() == b"done /slow"
            await draining
        for writer in (kept, slow):
            writer.close()
    finally:
        await server.stop()


async def test_a_drain_gives_up_at_its_deadline_and_stop_ends_the_rest() -> None:
    """A request that does not end within the drain's time is cut by the stop that follows."""
    echo = Echo()
    server = HttpServer(echo, body_limit=LIMIT, too_large=lambda: Response(413, b""), tls=None)
    port = await server.start("127.0.0.1", 0)
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(post("/wait", b""))
        async with asyncio.timeout(10):
            await echo.waiting.wait()
        await server.drain(0.1)
        assert not echo.cancelled.is_set()
    finally:
        await server.stop()
    async with asyncio.timeout(10):
        await echo.cancelled.wait()
    writer.close()


async def test_a_drain_closes_the_kept_connections_left_idle_once_it_has_lingered() -> None:
    """A kept-alive connection on which nothing came while the drain lingered is closed as the
    drain ends, in good order, not left open for the stop to cut: a client that sends on it
    then would lose its request to a reset, with no way to tell it was never served."""
    echo = Echo()
    server = HttpServer(echo, body_limit=LIMIT, too_large=lambda: Response(413, b""), tls=None)
    port = await server.start("127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(post("/first", b""))
        assert (await read_answer(reader))[0] == 200
        await server.drain(10, linger=0.05)
        async with asyncio.timeout(10):
            assert await reader.read() == b"", "closed by the server once the drain is over"
        writer.close()
    finally:
        await server.stop()
