"""A lean HTTP/1.1 client for the one call on every item's path: ``POST /invoke`` to an agent.

``agentpool.io.agents`` sends each item's envelope through :class:`WirePool` rather than
aiohttp's ``ClientSession``: the operator is CPU-bound on small items, and a session request
costs about three times the CPU of writing one prebuilt request and reading one answer on a kept
connection (``python -m bench`` measures the difference). Only plain ``http://`` endpoints come
here; the agent client keeps aiohttp for everything else and for the rarer calls.

Connections are kept alive per (host, port), one request at a time each, and dropped after
:data:`IDLE_SECONDS` idle (as aiohttp's connector does), so a kept connection is never older than
the agent's own keep-alive. Answers may be sized by ``Content-Length``, be chunked, or run to the
connection's end.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

IDLE_SECONDS = 15.0
_MAX_HEADERS = 100


class WireError(Exception):
    """The answer broke HTTP/1.1 framing: the agent's state is unknown."""


@dataclass(slots=True)
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = field(default_factory=time.monotonic)

    def usable(self, now: float) -> bool:
        return (
            not self.writer.is_closing()
            and not self.reader.at_eof()
            and now - self.idle_since < IDLE_SECONDS
        )

    def close(self) -> None:
        self.writer.close()


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes


class WirePool:
    """Kept-alive connections to agents, by (host, port)."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, int], list[_Connection]] = {}

    async def _connect(self, host: str, port: int) -> _Connection:
        now = time.monotonic()
        idle = self._idle.get((host, port))
        while idle:
            connection = idle.pop()
            if connection.usable(now):
                return connection
            connection.close()
        reader, writer = await asyncio.open_connection(host, port)
        return _Connection(reader, writer)

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
            connection.idle_since = time.monotonic()
            self._idle.setdefault((host, port), []).append(connection)
        else:
            connection.close()
        return answer

    def close(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()


async def _read_answer(reader: asyncio.StreamReader) -> tuple[Answer, bool]:
    """One HTTP/1.1 answer, and whether the connection may carry another."""
    line = await reader.readline()
    if not line:
        raise asyncio.IncompleteReadError(b"", None)
    parts = line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise WireError(f"not an HTTP/1.1 status line: {line[:80]!r}")
    status = int(parts[1])
    keep = parts[0] == b"HTTP/1.1"
    length: int | None = None
    chunked = False
    for _ in range(_MAX_HEADERS):
        header = await reader.readline()
        if header in (b"\r\n", b"\n"):
            break
        if not header.endswith(b"\n"):
            raise asyncio.IncompleteReadError(header, None)
        name, _, value = header.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif name == b"connection":
            keep = keep and b"close" not in value.lower()
    else:
        raise WireError(f"more than {_MAX_HEADERS} headers")
    if chunked:
        body = await _read_chunks(reader)
    elif length is not None:
        body = await reader.readexactly(length)
    elif status in (204, 304) or status < 200:
        body = b""
    else:
        body, keep = await reader.read(), False
    return Answer(status, body), keep


async def _read_chunks(reader: asyncio.StreamReader) -> bytes:
    pieces = []
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
        pieces.append(await reader.readexactly(size))
        await reader.readexactly(2)
    # Trailers, if any, end with an empty line.
    while (trailer := await reader.readline()) not in (b"\r\n", b"\n"):
        if not trailer:
            raise asyncio.IncompleteReadError(b"", None)
    return b"".join(pieces)
