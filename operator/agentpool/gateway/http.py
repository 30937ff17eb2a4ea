"""The gateway's HTTP/1.1 server: one request at a time per kept-alive connection, parsed by
httptools, answered by a coroutine, cancelled the moment its caller goes away.

A gateway call is small and frequent, and the operator's one event loop also runs every pool,
run and lease, so the server keeps to what a call needs: httptools (the llhttp parser uvicorn is
built on) reads the request, chunked or sized, and says whether the connection stays open; the
request's task is cancelled when its connection drops, which takes a waiting caller out of the
pool's line at once; a body past the limit is answered 413 as soon as its size is known and the
rest of it read and dropped; a client that sends a request too slowly, or keeps an idle
connection, is cut off. :class:`HttpServer` serves the coroutine :mod:`agentpool.gateway.server`
hands it, over TLS. Less than a general web server: no upgrades, no trailers read, no request
pipelined ahead of its predecessor's answer (reading pauses until then).
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import json
import math
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httptools

#: The longest request head (request line and headers) taken, as aiohttp's server takes.
HEAD_LIMIT = 64 * 1024
#: Seconds a request may take to arrive whole, and an idle kept-alive connection may stay.
REQUEST_SECONDS = 60.0
IDLE_SECONDS = 75.0
#: Seconds the rest of a refused body is read and dropped before the connection closes, so the
#: caller reads the answer rather than a reset.
LINGER_SECONDS = 5.0
#: How often connections past their time are looked for.
SWEEP_SECONDS = 1.0


@dataclass(slots=True)
class Request:
    """A request as read: its method, path (query left out), the headers the gateway reads, and
    its body."""

    method: str
    path: str
    headers: dict[bytes, bytes] = field(default_factory=dict)
    body: bytes = b""


@dataclass(slots=True)
class Response:
    """An answer: status, body, content type, and extra headers."""

    status: int
    body: bytes
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()


Handler = Callable[[Request], Awaitable[Response]]
#: The headers the gateway reads; the others are not kept.
WANTED = frozenset(
    {
        b"authorization",
        b"content-length",
        b"expect",
        b"content-type",
        # The caller's trace, which the call's span continues (W3C trace context).
        b"traceparent",
        b"tracestate",
    }
)


def error_body(reason: str, message: str) -> bytes:
    """The JSON of an error answer, ``{"error": {"reason", "message"}}``."""
    error = {"reason": reason, "message": message}
    return json.dumps({"error": error}, separators=(",", ":")).encode()


def _encode(response: Response, *, close: bool) -> bytes:
    phrase = http.HTTPStatus(response.status).phrase
    lines = [
        f"HTTP/1.1 {response.status} {phrase}",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(response.body)}",
        *(f"{name}: {value}" for name, value in response.headers),
    ]
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + response.body


class _Connection(asyncio.Protocol):
    """One client connection: requests parsed as they arrive, served one after another."""

    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._request: Request | None = None
        self._url = b""
        self._head_bytes = 0
        self._body: list[bytes] = []
        self._body_size = 0
        self._ready: list[tuple[Request, bool]] = []
        self._task: asyncio.Task[None] | None = None
        # When the connection goes unless something happens first (loop time); the server's
        # sweep reads it, so a request costs no timer of its own.
        self.deadline = math.inf
        self._refused = False

    # -- asyncio.Protocol -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._server.connections.add(self)
        self._arm(self._server.idle_seconds)

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(400, "upgrades are not served")
        except httptools.HttpParserError as error:
            if not self._refused:
                self._fail(400, f"not an HTTP/1.1 request: {error}")

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.connections.discard(self)
        self._disarm()
        self._ready.clear()
        if self._task is not None:
            # The caller went away: a waiting checkout leaves the line, a call lets go.
            self._task.cancel()

    # -- httptools callbacks --------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url, self._head_bytes, self._body, self._body_size = b"", 0, [], 0
        self._request = None
        self._arm(self._server.request_seconds)

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value))
        if self._request is None:
            self._request = Request(method="", path="")
        key = name.lower()
        if key in WANTED:
            self._request.headers[key] = value

    def on_headers_complete(self) -> None:
        request = self._request or Request(method="", path="")
        self._request = request
        request.method = self._parser.get_method().decode("latin-1")
        request.path = httptools.parse_url(self._url).path.decode("latin-1", "replace")
        length = request.headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self._server.body_limit:
            self._refuse_body()
        elif request.headers.get(b"expect", b"").lower() == b"100-continue":
            self._write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        if self._refused:
            return
        self._body_size += len(body)
        if self._body_size > self._server.body_limit:
            self._body = []
            self._refuse_body()
            return
        self._body.append(body)

    def on_message_complete(self) -> None:
        request, self._request = self._request, None
        if self._refused:
            if self._transport is not None:
                self._transport.close()
            return
        if request is None or self._transport is None:
            return
        request.body = b"".join(self._body)
        self._body = []
        self._ready.append((request, self._parser.should_keep_alive()))
        self._disarm()
        if self._task is None:
            self._next()
        else:
            # One request at a time: the next is read once this one is answered.
            self._transport.pause_reading()

    # -- serving --------------------------------------------------------------------------------

    def _next(self) -> None:
        if not self._ready or self._transport is None:
            return
        request, keep_alive = self._ready.pop(0)
        self._task = self._loop.create_task(self._serve(request, keep_alive))

    async def _serve(self, request: Request, keep_alive: bool) -> None:
        try:
            response = await self._server.handler(request)
        except Exception:
            self._server.log_failure(request)
            body = error_body("InternalError", "the gateway failed on this request; see its log")
            response = Response(500, body)
        finally:
            self._task = None
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        transport.write(_encode(response, close=not keep_alive))
        if not keep_alive:
            transport.close()
            return
        self._arm(self._server.idle_seconds)
        transport.resume_reading()
        self._next()

    def _count_head(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > HEAD_LIMIT:
            self._fail(431, f"the request head is over {HEAD_LIMIT} bytes")

    def _fail(self, status: int, message: str) -> None:
        """Answer a request that cannot be read, then close: what follows cannot be trusted."""
        if self._refused or self._transport is None:
            return
        self._refused = True
        self._write(_encode(Response(status, error_body("Invalid", message)), close=True))
        self._transport.close()

    def _refuse_body(self) -> None:
        """Answer a body past the limit at once, then read and drop the rest of it (a while at
        most) before closing, so the caller reads the answer rather than a reset."""
        if self._refused or self._transport is None:
            return
        self._refused = True
        self._write(_encode(self._server.too_large(), close=True))
        self._arm(self._server.linger_seconds)

    def _write(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    def _arm(self, seconds: float) -> None:
        self.deadline = self._loop.time() + seconds

    def _disarm(self) -> None:
        self.deadline = math.inf

    def expire(self) -> None:
        """Idle too long, a request too slow to arrive, or a refused body read long enough: the
        connection goes."""
        if self._task is None and self._transport is not None:
            self._transport.close()


class HttpServer:
    """Serves ``handler`` over HTTP/1.1 (over TLS with ``tls``) once :meth:`start` returns."""

    def __init__(
        self,
        handler: Handler,
        *,
        body_limit: int,
        too_large: Callable[[], Response],
        tls: ssl.SSLContext | None,
        on_failure: Callable[[Request], None] = lambda _: None,
        idle_seconds: float = IDLE_SECONDS,
        request_seconds: float = REQUEST_SECONDS,
        linger_seconds: float = LINGER_SECONDS,
        sweep_seconds: float = SWEEP_SECONDS,
    ) -> None:
        self.handler = handler
        self.body_limit = body_limit
        self.too_large = too_large
        self.idle_seconds = idle_seconds
        self.request_seconds = request_seconds
        self.linger_seconds = linger_seconds
        self._sweep_seconds = sweep_seconds
        self.connections: set[_Connection] = set()
        self._tls = tls
        self._on_failure = on_failure
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None

    def log_failure(self, request: Request) -> None:
        self._on_failure(request)

    async def start(self, host: str, port: int) -> int:
        """Listen; returns the port (a free one for 0)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self), host, port, ssl=self._tls, reuse_address=True
        )
        self._sweeper = asyncio.create_task(self._sweep(), name="gateway-sweep")
        return int(self._server.sockets[0].getsockname()[1])

    async def _sweep(self) -> None:
        """Close, about once a second, the connections whose time is up."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self._sweep_seconds)
            now = loop.time()
            for connection in [c for c in self.connections if c.deadline <= now]:
                connection.expire()

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self._server is None:
            return
        self._server.close()
        for connection in list(self.connections):
            # A TLS connection closes only once the peer answers its close_notify, which an
            # idle kept-alive client never does: end those sockets outright.
            if connection._transport is not None:
                connection._transport.abort()
        with contextlib.suppress(Exception):
            await self._server.wait_closed()
        self._server = None
