"""A lean HTTP/1.1 client for the one call on every item's path: ``POST /invoke`` to an agent.

``agentpool.io.agents`` sends each item's envelope through :class:`WirePool` rather than
aiohttp's ``ClientSession``: the operator is CPU-bound on small items, and a session request
costs about three times the CPU of writing one prebuilt request and reading one answer on a kept
connection (``python -m bench`` measures the difference). Only plain ``http://`` endpoints come
here; the agent client keeps aiohttp for everything else and for the rarer calls. The Python
client calls its leased agents the same way, and sends gateway calls over TLS
(``WirePool(tls=...)``): the module sits below both, with nothing of the operator in it.

A forwarded request to an HTTP pool's agent takes the same kept connections
(:meth:`WirePool.exchange`): the caller's head and body streamed as they come, the answer's
status, headers and body read back as they arrive. aiohttp's request cost the gateway about a
third of its CPU per forwarded request, and it added headers of its own.

Connections are kept alive per (host, port), one request at a time each, and dropped after
:data:`IDLE_SECONDS` idle (as aiohttp's connector does), so a kept connection is never older than
the agent's own keep-alive. Idle connections are swept about once per that period, so those to
agents that are gone (retired, scaled down) do not pile up as open files. Answers may be sized
by ``Content-Length``, be chunked, or run to the connection's end.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass

IDLE_SECONDS = 15.0
#: The longest answer head (status line and headers) read from an agent.
HEAD_LIMIT = 64 * 1024


class WireError(Exception):
    """The answer broke HTTP/1.1 framing: the agent's state is unknown."""


class ClosedUnanswered(ConnectionError):
    """A kept connection closed before a byte of the answer, most likely as its server's
    keep-alive ended, and the request could not go again (it may not go twice, or its body
    was not kept): the server is most likely as it was, but whether it acted on the request is
    unknown."""


@dataclass(slots=True)
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float
    reused: bool = False
    """It has carried a request before: the agent may have closed it as it was taken."""

    def usable(self, now: float, idle_seconds: float) -> bool:
        return (
            not self.writer.is_closing()
            and not self.reader.at_eof()
            and now - self.idle_since < idle_seconds
        )

    def close(self) -> None:
        self.writer.close()


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes
    retry_after: bytes | None = None
    """The ``Retry-After`` header, as sent, when there is one."""


class WirePool:
    """Kept-alive connections to agents, by (host, port); over TLS with ``tls``, the server
    checked against it by the host's name."""

    def __init__(
        self,
        *,
        idle_seconds: float = IDLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._tls = tls
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._idle_seconds = idle_seconds
        self._clock = clock
        self._last_sweep = clock()

    def trust(self, tls: ssl.SSLContext | None) -> None:
        """Open new connections with ``tls`` from now on; kept ones stay (each was checked when
        it opened)."""
        self._tls = tls

    @property
    def kept(self) -> int:
        """Idle connections kept open for a next request."""
        return sum(len(connections) for connections in self._idle.values())

    async def _connect(self, host: str, port: int, *, fresh: bool = False) -> _Connection:
        now = self._clock()
        idle = self._idle.get((host, port))
        while idle and not fresh:
            connection = idle.pop()
            if connection.usable(now, self._idle_seconds):
                connection.reused = True
                return connection
            connection.close()
        reader, writer = await asyncio.open_connection(
            host,
            port,
            limit=HEAD_LIMIT,
            ssl=self._tls,
            server_hostname=host if self._tls is not None else None,
        )
        return _Connection(reader, writer, now)

    def _sweep(self, now: float) -> None:
        """Close idle connections past their time, to agents not called since (or gone)."""
        self._last_sweep = now
        for key, connections in list(self._idle.items()):
            kept = [c for c in connections if c.usable(now, self._idle_seconds)]
            for connection in connections:
                if connection not in kept:
                    connection.close()
            if kept:
                self._idle[key] = kept
            else:
                del self._idle[key]

    @contextlib.asynccontextmanager
    async def stream(
        self, host: str, port: int, head: bytes, body: bytes
    ) -> AsyncIterator[Streamed]:
        """Send as :meth:`request` does, and read the answer as it comes while the context is
        open. The connection is not kept: an answer left half-read could not carry another."""
        connection = await self._connect(host, port)
        try:
            connection.writer.write(
                b"".join((head, b"Content-Length: %d\r\n\r\n" % len(body), body))
            )
            answer = await _read_head(connection.reader)
            yield Streamed(
                answer.status,
                answer.content_type,
                answer.retry_after,
                _stream_pieces(connection.reader, answer),
            )
        finally:
            connection.close()
            # Closed before the caller goes on, so no socket outlives its stream.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await connection.writer.wait_closed()

    @contextlib.asynccontextmanager
    async def exchange(
        self,
        host: str,
        port: int,
        head: bytes,
        body: bytes | AsyncIterable[bytes] | None,
        *,
        sized: bool,
        timeout: float,
        bodiless: bool = False,
        idempotent: bool = False,
    ) -> AsyncIterator[Exchanged]:
        """Send ``head`` (request line and headers, framing included but for chunking) and
        ``body``, whole or as it comes, and read the answer while the context is open: its
        status, its headers as sent, and its body's pieces as they arrive. A body not ``sized``
        by the head's own Content-Length goes chunked. The head leaves with the body's first
        piece, in one write. ``timeout`` bounds the connection, the wait for the answer's head
        and each wait for more of it (``TimeoutError``). The connection is kept for the next
        request only when the body was sent whole and the answer read to its end. The answer to
        a ``HEAD`` is ``bodiless``, whatever its Content-Length says. An ``idempotent`` request
        that met a kept connection the agent closed, unanswered, goes once more on a new one
        when all of its body can be sent again (at most :data:`REPLAY_LIMIT` of it), as
        RFC 9112 (9.3.1) allows; any other cannot tell whether the agent acted on it."""
        replayable: _Replayable | None = None
        if idempotent and body is not None and not isinstance(body, bytes):
            replayable = _Replayable(body)
        sent_body = body if replayable is None else replayable
        connection = await self._connect_within(host, port, timeout)
        sending: asyncio.Task[None] | None = None
        kept = False
        try:
            try:
                sending, answer = await _begin(connection, head, sent_body, sized, timeout)
            except _CLOSED_UNANSWERED as error:
                # A kept connection the agent closed as it was taken, before a byte of answer:
                # a request that may go twice goes again, once, on a new one, when all of it can.
                if not connection.reused or not _unanswered(error):
                    raise
                if not idempotent or (replayable is not None and not replayable.whole):
                    raise ClosedUnanswered(
                        "the agent closed a kept connection as the request went, unanswered"
                    ) from error
                connection.close()
                connection = await self._connect_within(host, port, timeout, fresh=True)
                again = body if replayable is None else replayable.again()
                sending, answer = await _begin(connection, head, again, sized, timeout)
            pieces = _Pieces(connection.reader, answer, timeout, bodiless=bodiless)
            yield Exchanged(answer.status, answer.headers, pieces)
            sent = sending is None or (
                sending.done() and not sending.cancelled() and sending.exception() is None
            )
            kept = sent and pieces.ended and answer.keep and (bodiless or answer.delimited)
        finally:
            if sending is not None:
                sending.cancel()  # an answer that ended before its body did wants no more of it
            if kept:
                self._keep(host, port, connection)
            else:
                connection.close()

    def _keep(self, host: str, port: int, connection: _Connection) -> None:
        now = self._clock()
        connection.idle_since = now
        self._idle.setdefault((host, port), []).append(connection)
        if now - self._last_sweep >= self._idle_seconds:
            self._sweep(now)

    async def _connect_within(
        self, host: str, port: int, timeout: float, *, fresh: bool = False
    ) -> _Connection:
        async with asyncio.timeout(timeout):
            return await self._connect(host, port, fresh=fresh)

    async def request(self, host: str, port: int, head: bytes, body: bytes) -> Answer:
        """Send ``head`` (request line and headers, without Content-Length) and ``body``.

        The caller bounds the time (``asyncio.timeout``); a cancelled or failed exchange closes
        its connection, so a half-read answer is never mistaken for the next one.
        """
        connection = await self._connect(host, port)
        try:
            connection.writer.write(
                b"".join((head, b"Content-Length: %d\r\n\r\n" % len(body), body))
            )
            answer, keep = await _read_answer(connection.reader)
        except BaseException:
            connection.close()
            raise
        if keep:
            self._keep(host, port, connection)
        else:
            connection.close()
        return answer

    def close(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()

    async def aclose(self, timeout: float = 1.0) -> None:
        """:meth:`close`, and wait (``timeout`` at most) until the connections are closed: a
        TLS connection closes only after its goodbye is sent, and one still open when its loop
        ends is left to the garbage collector. Past the timeout they are cut off."""
        connections = [c for kept in self._idle.values() for c in kept]
        self.close()
        try:
            async with asyncio.timeout(timeout):
                await asyncio.gather(
                    *(c.writer.wait_closed() for c in connections), return_exceptions=True
                )
        except TimeoutError:
            for connection in connections:
                connection.writer.transport.abort()


@dataclass(frozen=True, slots=True)
class Streamed:
    """An answer read as it comes: its status, ``Content-Type`` and ``Retry-After`` (as sent,
    when there are), and its body's pieces as they arrive (chunked framing taken off)."""

    status: int
    content_type: bytes
    retry_after: bytes | None
    pieces: AsyncIterator[bytes]


@dataclass(frozen=True, slots=True)
class Exchanged:
    """An answer to :meth:`WirePool.exchange` as it comes: its status, its headers as sent, and
    its body's pieces as they arrive (chunked framing taken off)."""

    status: int
    headers: list[tuple[bytes, bytes]]
    pieces: AsyncIterator[bytes]


@dataclass(frozen=True, slots=True)
class _Head:
    status: int
    keep: bool
    length: int | None
    chunked: bool
    retry_after: bytes | None
    content_type: bytes
    headers: list[tuple[bytes, bytes]]

    @property
    def bodiless(self) -> bool:
        """An answer that has no body, whatever its Content-Length says (RFC 9112 6.3)."""
        return self.status in (204, 304) or self.status < 200

    @property
    def delimited(self) -> bool:
        """Its end is known without the connection's: the connection may carry another."""
        return self.bodiless or self.chunked or self.length is not None


async def _read_answer(reader: asyncio.StreamReader) -> tuple[Answer, bool]:
    """One HTTP/1.1 answer, and whether the connection may carry another."""
    head = await _read_head(reader)
    keep = head.keep
    if head.bodiless:
        body = b""
    elif head.chunked:
        body = await _read_chunks(reader)
    elif head.length is not None:
        body = await reader.readexactly(head.length)
    else:
        body, keep = await reader.read(), False
    return Answer(head.status, body, head.retry_after), keep


async def _read_head(reader: asyncio.StreamReader) -> _Head:
    try:
        # The whole head at once: a read per header line would cost every item a few more.
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise WireError(f"the answer's head is over {HEAD_LIMIT} bytes") from None
    lines = head.split(b"\r\n")
    status_line = lines[0]
    parts = status_line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise WireError(f"not an HTTP/1.1 status line: {status_line[:80]!r}")
    status = int(parts[1])
    keep = parts[0] == b"HTTP/1.1"
    length: int | None = None
    chunked = False
    retry_after: bytes | None = None
    content_type = b""
    headers: list[tuple[bytes, bytes]] = []
    # The head ends with two empty lines after the split: the blank line and what follows it.
    for header in lines[1:-2]:
        given, _, value = header.partition(b":")
        value = value.strip()
        headers.append((given.strip(), value))
        name = given.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif name == b"connection":
            keep = keep and b"close" not in value.lower()
        elif name == b"retry-after":
            retry_after = value.strip()
        elif name == b"content-type":
            content_type = value.strip()
    return _Head(status, keep, length, chunked, retry_after, content_type, headers)


#: How a kept connection the agent closed meanwhile fails a request sent on it.
_CLOSED_UNANSWERED = (ConnectionResetError, BrokenPipeError, asyncio.IncompleteReadError)
#: The most of a request's body kept to send it again on a new connection.
REPLAY_LIMIT = 64 * 1024


def _unanswered(error: BaseException) -> bool:
    """Not a byte of the answer came before the connection ended."""
    return not isinstance(error, asyncio.IncompleteReadError) or not error.partial


class _Replayable:
    """A request's body, passed through as it comes and kept while it is small, so that a
    request that met a closed connection can go again: ``whole`` once it has ended within
    :data:`REPLAY_LIMIT`."""

    def __init__(self, body: AsyncIterable[bytes]) -> None:
        self._body = aiter(body)
        self._kept: list[bytes] | None = []
        self._size = 0
        self.whole = False

    def __aiter__(self) -> _Replayable:
        return self

    async def __anext__(self) -> bytes:
        try:
            piece = await anext(self._body)
        except StopAsyncIteration:
            self.whole = self._kept is not None
            raise
        self._size += len(piece)
        if self._kept is not None and self._size <= REPLAY_LIMIT:
            self._kept.append(piece)
        else:
            self._kept = None
        return piece

    async def again(self) -> AsyncIterator[bytes]:
        for piece in self._kept or ():
            yield piece


async def _begin(
    connection: _Connection,
    head: bytes,
    body: bytes | AsyncIterable[bytes] | None,
    sized: bool,
    timeout: float,
) -> tuple[asyncio.Task[None] | None, _Head]:
    """Send the request (a body that comes piece by piece in a task of its own) and read the
    answer's head within ``timeout``; the sending task, if any, and the head."""
    sending: asyncio.Task[None] | None = None
    if body is None:
        connection.writer.write(head + b"\r\n")
    elif isinstance(body, bytes):
        if not sized:
            head += b"Transfer-Encoding: chunked\r\n"
            body = (b"%x\r\n%b\r\n" % (len(body), body) if body else b"") + b"0\r\n\r\n"
        connection.writer.write(head + b"\r\n" + body)
    else:
        sending = asyncio.create_task(_send(connection.writer, head, body, sized))
        sending.add_done_callback(_retrieved)
    try:
        async with asyncio.timeout(timeout):
            return sending, await _head_unless_unsent(connection.reader, sending)
    except BaseException:
        if sending is not None:
            sending.cancel()
        raise


#: How long an answer may still come once the agent has stopped reading the request's body.
_LATE_ANSWER = 0.05


def _retrieved(task: asyncio.Task[None]) -> BaseException | None:
    """The task's failure, read (so never reported as unread); None when it did not fail."""
    return None if task.cancelled() else task.exception()


async def _head_unless_unsent(
    reader: asyncio.StreamReader, sending: asyncio.Task[None] | None
) -> _Head:
    """The answer's head; the failure to send the body when no answer comes after it."""
    if sending is None:
        return await _read_final_head(reader)
    reading = asyncio.ensure_future(_read_final_head(reader))
    try:
        await asyncio.wait([reading, sending], return_when=asyncio.FIRST_COMPLETED)
        if not reading.done() and (failed := _retrieved(sending)) is not None:
            # The agent may have answered before it stopped reading: that answer wins.
            await asyncio.wait([reading], timeout=_LATE_ANSWER)
            if not reading.done():
                raise failed
        return await reading
    finally:
        reading.cancel()


async def _read_final_head(reader: asyncio.StreamReader) -> _Head:
    """The answer's head, past any interim ``1xx`` but ``101`` (a protocol switch, which is the
    caller's to refuse)."""
    while True:
        head = await _read_head(reader)
        if not 100 <= head.status < 200 or head.status == 101:
            return head


async def _send(
    writer: asyncio.StreamWriter, head: bytes, body: AsyncIterable[bytes], sized: bool
) -> None:
    """The request: its head with the body's first piece in one write, then the rest as it
    comes, chunked unless ``sized``, each piece sent before the next is read."""
    if not sized:
        head += b"Transfer-Encoding: chunked\r\n"
    pending = head + b"\r\n"
    async for piece in body:
        if not piece:
            continue
        writer.write(pending + (piece if sized else b"%x\r\n%b\r\n" % (len(piece), piece)))
        pending = b""
        await writer.drain()
    writer.write(pending if sized else pending + b"0\r\n\r\n")
    await writer.drain()


class _Pieces:
    """An answer's body as it arrives, each wait for more bounded by ``timeout``; ``ended`` once
    read to its end, when its connection may carry another request."""

    def __init__(
        self, reader: asyncio.StreamReader, head: _Head, timeout: float, *, bodiless: bool
    ) -> None:
        self._pieces = _nothing() if bodiless else _stream_pieces(reader, head)
        self._timeout = timeout
        self.ended = False

    def __aiter__(self) -> _Pieces:
        return self

    async def __anext__(self) -> bytes:
        try:
            async with asyncio.timeout(self._timeout):
                return await anext(self._pieces)
        except StopAsyncIteration:
            self.ended = True
            raise


async def _stream_pieces(reader: asyncio.StreamReader, head: _Head) -> AsyncIterator[bytes]:
    """The body of an answer as it arrives; ``asyncio.IncompleteReadError`` when it ends
    short."""
    if head.bodiless:
        return
    if head.chunked:
        async for piece in _chunks(reader):
            yield piece
    elif head.length is not None:
        left = head.length
        while left > 0:
            piece = await reader.read(min(left, 65536))
            if not piece:
                raise asyncio.IncompleteReadError(b"", left)
            left -= len(piece)
            yield piece
    else:
        while piece := await reader.read(65536):
            yield piece


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield


async def _read_chunks(reader: asyncio.StreamReader) -> bytes:
    return b"".join([piece async for piece in _chunks(reader)])


async def _chunks(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """A chunked body's chunks as they arrive, its trailers read and dropped at its end."""
    while True:
        size_line = await reader.readline()
        if not size_line.endswith(b"\n"):
            raise asyncio.IncompleteReadError(size_line, None)
        try:
            size = int(size_line.split(b";", 1)[0], 16)
        except ValueError:
            raise WireError(f"bad chunk size: {size_line[:40]!r}") from None
        if size == 0:
            break
        yield await reader.readexactly(size)
        await reader.readexactly(2)
    # Trailers, if any, end with an empty line.
    while (trailer := await reader.readline()) not in (b"\r\n", b"\n"):
        if not trailer:
            raise asyncio.IncompleteReadError(b"", None)
