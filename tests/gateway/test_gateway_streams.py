"""Streamed requests on the gateway's HTTP/1.1: a body read as it arrives, an answer sent as it is
written (chunked, or sized when its length is known), one broken off mid-way ending the
connection, and a caller gone mid-answer cancelling its handler."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentpool.gateway.http import HttpServer, Request, Response, error_body


class Streamer:
    """Echoes a streamed body back part by part; some paths hold, answer sized, or break off."""

    def __init__(self) -> None:
        self.go_on = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def __call__(self, request: Request) -> Response | None:
        if request.answer is None or request.stream is None:
            return Response(200, b"whole " + request.body)
        answer = request.answer
        path = request.path.removeprefix("/s")
        if path == "/sized":
            body = b"".join([chunk async for chunk in request.stream])
            answer.start(200, [("Content-Length", str(len(body))), ("X-Kind", "sized")])
            await answer.write(body)
            answer.end()
            return None
        if path == "/refuse":
            return Response(409, error_body("Busy", "not now"))
        answer.start(200, [("Content-Type", "text/event-stream")])
        try:
            if path == "/late":
                await self.go_on.wait()
                await answer.write(b"data: late\n\n")
            elif path == "/hold":
                await answer.write(b"data: first\n\n")
                await self.go_on.wait()
                await answer.write(b"data: second\n\n")
            elif path == "/break":
                await answer.write(b"data: first\n\n")
                return None  # not ended: broken off
            else:
                async for chunk in request.stream:
                    await answer.write(chunk)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        answer.end()
        return None


@pytest.fixture
async def served() -> AsyncIterator[tuple[Streamer, str]]:
    handler = Streamer()
    server = HttpServer(
        handler,
        body_limit=16,
        too_large=lambda: Response(413, error_body("TooLarge", "too large")),
        tls=None,
        streams=lambda target: target.startswith(b"/s/"),
    )
    port = await server.start("127.0.0.1", 0)
    yield handler, f"http://127.0.0.1:{port}"
    await server.stop()


async def test_each_part_reaches_the_caller_as_it_is_written(
    served: tuple[Streamer, str],
) -> None:
    handler, url = served
    async with aiohttp.ClientSession() as session, session.get(f"{url}/s/hold") as response:
        assert response.headers["Transfer-Encoding"] == "chunked"
        async with asyncio.timeout(10):
            first = await response.content.readuntil(b"\n\n")
        assert first == b"data: first\n\n"
        # The handler writes its second part only once the first has been read.
        handler.go_on.set()
        assert await response.content.read() == b"data: second\n\n"


async def test_the_head_reaches_the_caller_before_a_first_part_that_comes_late(
    served: tuple[Streamer, str],
) -> None:
    """A head waits to leave with the first part only while that part is at hand: an event
    stream whose first event is slow still shows the caller its status at once."""
    handler, url = served
    async with aiohttp.ClientSession() as session:
        async with asyncio.timeout(10):
            response = await session.get(f"{url}/s/late")
        assert response.status == 200
        assert not handler.go_on.is_set()
        handler.go_on.set()
        assert await response.content.read() == b"data: late\n\n"
        response.release()


async def test_a_body_streams_to_the_handler_while_the_caller_still_sends(
    served: tuple[Streamer, str],
) -> None:
    _, url = served
    sent = asyncio.Queue[bytes | None]()

    async def body() -> AsyncIterator[bytes]:
        while (part := await sent.get()) is not None:
            yield part

    async with aiohttp.ClientSession() as session:
        await sent.put(b"one ")
        async with session.post(f"{url}/s/echo", data=body()) as response:
            async with asyncio.timeout(10):
                assert await response.content.readexactly(4) == b"one "
            await sent.put(b"two")
            await sent.put(None)
            assert await response.content.read() == b"two"


async def test_sized_answers_keep_their_length_and_the_connection_serves_on(
    served: tuple[Streamer, str],
) -> None:
    _, url = served
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(connector=connector) as session:
        for n in range(3):
            body = b"x" * 1000 * n  # past the buffered requests' limit: streamed bodies have none
            async with session.post(f"{url}/s/sized", data=body) as response:
                assert response.headers["Content-Length"] == str(len(body))
                assert "Transfer-Encoding" not in response.headers
                assert response.headers["X-Kind"] == "sized"
                assert await response.read() == body
        async with session.post(f"{url}/s/refuse", data=b"{}") as response:
            assert response.status == 409
        async with session.post(f"{url}/whole", data=b"ok") as response:
            assert await response.read() == b"whole ok"
    async with aiohttp.ClientSession() as session, session.head(f"{url}/s/sized") as response:
        assert response.headers["Content-Length"] == "0"


async def test_an_answer_broken_off_is_an_error_to_the_caller(
    served: tuple[Streamer, str],
) -> None:
    _, url = served
    async with aiohttp.ClientSession() as session, session.get(f"{url}/s/break") as response:
        assert response.status == 200
        with pytest.raises(aiohttp.ClientPayloadError):
            await response.read()


async def test_a_caller_gone_mid_answer_cancels_the_handler(
    served: tuple[Streamer, str],
) -> None:
    handler, url = served
    async with aiohttp.ClientSession() as session:
        response = await session.get(f"{url}/s/hold")
        async with asyncio.timeout(10):
            await response.content.readuntil(b"\n\n")
        response.close()
        async with asyncio.timeout(10):
            await handler.cancelled.wait()


@settings(max_examples=30, deadline=None)
@given(parts=st.lists(st.binary(min_size=1, max_size=300), max_size=8))
async def test_any_body_in_any_pieces_comes_back_whole(parts: list[bytes]) -> None:
    server = HttpServer(
        Streamer(),
        body_limit=16,
        too_large=lambda: Response(413, b"{}"),
        tls=None,
        streams=lambda _: True,
    )
    port = await server.start("127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        head = b"POST /s/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        chunks = [b"%x\r\n%b\r\n" % (len(part), part) for part in parts]
        for piece in [head, *chunks, b"0\r\n\r\n"]:
            writer.write(piece)
            await writer.drain()
        async with asyncio.timeout(10):
            answer_head = await reader.readuntil(b"\r\n\r\n")
            assert answer_head.startswith(b"HTTP/1.1 200")
            echoed = b""
            while (size := int((await reader.readuntil(b"\r\n"))[:-2], 16)) > 0:
                echoed += await reader.readexactly(size)
                await reader.readexactly(2)
        assert echoed == b"".join(parts)
        writer.close()
    finally:
        await server.stop()


class Stalls:
    """Reads a streamed body, or writes an endless answer, noting how each ended."""

    def __init__(self) -> None:
        self.ended: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def __call__(self, request: Request) -> Response | None:
        assert request.answer is not None
        assert request.stream is not None
        try:
            if request.path == "/upload":
                async for _ in request.stream:
                    pass
            elif request.path == "/refuse":
                return Response(403, error_body("Forbidden", "not you"))
            else:
                request.answer.start(200, [("Content-Type", "application/octet-stream")])
                for _ in range(4096):  # at most 256 MiB: bounded, past any socket buffer
                    await request.answer.write(b"x" * 65536)
        except ConnectionError as error:
            self.ended.set_result(str(error))
            raise
        self.ended.set_result("whole")
        request.answer.end()
        return None


@pytest.fixture
async def stalled() -> AsyncIterator[tuple[Stalls, int]]:
    handler = Stalls()
    server = HttpServer(
        handler,
        body_limit=16,
        too_large=lambda: Response(413, b"{}"),
        tls=None,
        streams=lambda _: True,
        request_seconds=0.5,
        linger_seconds=5,
    )
    port = await server.start("127.0.0.1", 0)
    yield handler, port
    await server.stop()


async def test_a_caller_that_stops_sending_its_body_is_cut_off(
    stalled: tuple[Stalls, int],
) -> None:
    handler, port = stalled
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"
    )
    async with asyncio.timeout(10):
        assert "sent nothing of its body" in await handler.ended
        assert await reader.read() == b""  # the connection was cut
    writer.close()


async def test_a_caller_that_stops_reading_is_cut_off(stalled: tuple[Stalls, int]) -> None:
    handler, port = stalled
    _, writer = await asyncio.open_connection("127.0.0.1", port, limit=1024)
    writer.write(b"GET /endless HTTP/1.1\r\nHost: x\r\n\r\n")
    async with asyncio.timeout(30):
        assert "read nothing of the answer" in await handler.ended
    writer.close()


async def test_a_refused_request_s_caller_reads_the_answer_not_a_reset(
    stalled: tuple[Stalls, int],
) -> None:
    """The handler answers before reading the body; the caller, sending all of it first, still
    reads the answer."""
    _, port = stalled
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = b"y" * (4 * 1024 * 1024)
    writer.write(b"POST /refuse HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body))
    writer.write(body)
    async with asyncio.timeout(10):
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 403")
    assert b"Connection: close" in head
    writer.close()


async def test_http_1_0_and_bodiless_answers_keep_their_framing(
    served: tuple[Streamer, str],
) -> None:
    _, url = served
    port = int(url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /s/echo HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello")
    async with asyncio.timeout(10):
        answer = await reader.read()  # an HTTP/1.0 answer ends with the connection
    assert b"Transfer-Encoding" not in answer
    assert answer.endswith(b"\r\n\r\nhello")
    writer.close()
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as session,
    ):
        async with session.head(f"{url}/s/sized") as response:
            assert response.status == 200
        async with session.post(f"{url}/s/sized", data=b"after") as response:
            assert await response.read() == b"after"


async def test_a_pipelined_expect_continue_does_not_land_inside_an_answer(
    served: tuple[Streamer, str],
) -> None:
    handler, url = served
    port = int(url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"GET /s/hold HTTP/1.1\r\nHost: x\r\n\r\n"
        b"POST /s/echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"
    )
    async with asyncio.timeout(10):
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        first = await reader.readuntil(b"first\n\n\r\n")
        handler.go_on.set()
        rest = await reader.readuntil(b"0\r\n\r\n")
    assert b"HTTP/1.1 100" not in first + rest
    assert rest.endswith(b"data: second\n\n\r\n0\r\n\r\n")
    writer.write(b"ok")
    async with asyncio.timeout(10):
        # The echo answers before it reads the body: no 100 Continue goes inside its answer.
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        assert await reader.readuntil(b"0\r\n\r\n") == b"2\r\nok\r\n0\r\n\r\n"
    writer.close()
