"""A lean HTTP/1.1 client for the one call on every item's path: ``POST /invoke`` to an agent.

``agentpool.io.agents`` sends each item's envelope through :class:`WirePool` rather than
aiohttp's ``ClientSession``: the operator is CPU-bound on small items, and a session request
costs about three times the CPU of writing one prebuilt request and reading one answer on a kept
connection (``python -m bench`` measures the difference). Only plain ``http://`` endpoints come
here; the agent client keeps aiohttp for everything else and for the rarer calls. The Python
client calls its leased agents the same way, and sends gateway calls over TLS
(``WirePool(tls=...)``): the module sits below both, with nothing of the operator in it.

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
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

IDLE_SECONDS = 15.0
#: The longest answer head (status line and headers) read from an agent.
HEAD_LIMIT = 64 * 1024


class WireError(Exception):
    """The answer broke HTTP/1.1 framing: the agent's state is unknown."""


@dataclass(slots=True)
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float

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

    async def _connect(self, host: str, port: int) -> _Connection:
        now = self._clock()
        idle = self._idle.get((host, port))
        while idle:
            connection = idle.pop()
            if connection.usable(now, self._idle_seconds):
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
        now = self._clock()
        if keep:
            connection.idle_since = now
            self._idle.setdefault((host, port), []).append(connection)
        else:
            connection.close()
        if now - self._last_sweep >= self._idle_seconds:
            self._sweep(now)
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
class _Head:
    status: int
    keep: bool
    length: int | None
    chunked: bool
    retry_after: bytes | None
    content_type: bytes


async def _read_answer(reader: asyncio.StreamReader) -> tuple[Answer, bool]:
    """One HTTP/1.1 answer, and whether the connection may carry another."""
    head = await _read_head(reader)
    keep = head.keep
    if head.chunked:
        body = await _read_chunks(reader)
    elif head.length is not None:
        body = await reader.readexactly(head.length)
    elif head.status in (204, 304) or head.status < 200:
        body = b""
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
    # The head ends with two empty lines after the split: the blank line and what follows it.
    for header in lines[1:-2]:
        name, _, value = header.partition(b":")
        name = name.strip().lower()
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
    return _Head(status, keep, length, chunked, retry_after, content_type)


async def _stream_pieces(reader: asyncio.StreamReader, head: _Head) -> AsyncIterator[bytes]:
    """The body of an answer as it arrives; ``asyncio.IncompleteReadError`` when it ends
    short."""
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
    elif not (head.status in (204, 304) or head.status < 200):
        while piece := await reader.read(65536):
            yield piece


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
