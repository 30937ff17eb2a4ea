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

A request whose path the server is told streams (a forwarded one) is served from its head on:
its body comes as a :class:`Body` the handler reads as it arrives (reading from the caller
pauses while :data:`BODY_BUFFER` bytes wait unread), and its answer may be a :class:`Stream`,
written part by part as chunks (or sized, when its length is known) and paced by the caller's
reading. An answer broken off mid-way ends the connection, so the caller's client sees a
truncated body, never a whole one.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import http
import json
import logging
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
#: Bytes of a streamed request's body read ahead of its handler before reading pauses.
BODY_BUFFER = 256 * 1024
#: Statuses whose answers have no body (RFC 9110 6.4.1).
_BODILESS = frozenset({204, 304})

log = logging.getLogger(__name__)


class Body:
    """A streamed request's body as it arrives: ``async for chunk in body``. Raises
    ``ConnectionError`` when the caller goes away before sending all of it, or sends none of
    what is left for the server's request time (the connection is then cut). A caller that asked
    ``Expect: 100-continue`` is told to go on when the body is first read, once the request has
    been let in and has its agent."""

    def __init__(self, connection: _Connection, *, expects_continue: bool = False) -> None:
        self._connection = connection
        self._chunks: collections.deque[bytes] = collections.deque()
        self._size = 0
        self._ended = False
        self._broken = False
        self._dropping = False
        self._expects_continue = expects_continue
        self._waiter: asyncio.Future[None] | None = None
        #: The answer to the request: once it has started, a 100 Continue would land inside it.
        self.answer: Stream | None = None

    @property
    def ended(self) -> bool:
        """The caller has sent all of it (it may still wait unread)."""
        return self._ended

    def __aiter__(self) -> Body:
        return self

    async def __anext__(self) -> bytes:
        if self._expects_continue:
            self._expects_continue = False
            if self.answer is None or not self.answer.started:
                self._connection.send(b"HTTP/1.1 100 Continue\r\n\r\n")
        while not self._chunks:
            if self._broken:
                raise ConnectionError("the caller went away before sending all of the body")
            if self._ended:
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(self._waiter, self._connection.stall_seconds)
            except TimeoutError:
                self._connection.cut()
                raise ConnectionError(
                    f"the caller sent nothing of its body for {self._connection.stall_seconds:g} s"
                ) from None
            finally:
                self._waiter = None
        chunk = self._chunks.popleft()
        self._size -= len(chunk)
        if self._size < BODY_BUFFER and not self._ended:
            self._connection.read_for_body()
        return chunk

    def whole(self) -> bytes | None:
        """All of the body, taken at once, when the caller has sent it all and it waits here
        (a small request's body comes with its head); None while more is to come, or while the
        caller waits to be told to go on."""
        if not self._ended or self._expects_continue or self._broken or self._dropping:
            return None
        data = b"".join(self._chunks)
        self._chunks.clear()
        self._size = 0
        return data

    def feed(self, chunk: bytes) -> None:
        if self._dropping:
            return
        self._chunks.append(chunk)
        self._size += len(chunk)
        if self._size >= BODY_BUFFER:
            self._connection.pause_for_body()
        self._wake()

    def end(self) -> None:
        self._ended = True
        self._wake()

    def break_off(self) -> None:
        self._broken = not self._ended
        self._wake()

    def drop_rest(self) -> None:
        """Nobody will read the rest: what is held, and what comes, is dropped."""
        self._dropping = True
        self._chunks.clear()
        self._size = 0

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class Stream:
    """An answer written as it comes: :meth:`start` with its status and headers, then
    :meth:`write` each part, then :meth:`end`. Sized when the headers carry a
    ``Content-Length``, chunked otherwise."""

    def __init__(
        self, connection: _Connection, *, head_only: bool, keep_alive: bool, http10: bool = False
    ) -> None:
        self._connection = connection
        self._head_only = head_only
        # An HTTP/1.0 caller reads no chunks: its answer's end is the connection's.
        self._http10 = http10
        self.keep_alive = keep_alive and not http10
        self.started = False
        self.ended = False
        self._chunked = False
        self._bodiless = False
        #: The head, until it leaves with the body's first piece or on the loop's next turn.
        self._head = b""

    @property
    def gone(self) -> bool:
        """The caller's connection has gone (or been cut)."""
        return self._connection.closing

    def start(self, status: int, headers: list[tuple[str, str]]) -> None:
        """Write the answer's head; ``headers`` are end-to-end ones, framing aside. The head
        leaves with the first of the body written at once (one TLS record and one send for a
        small answer), or on the loop's next turn when none is."""
        self.started = True
        sized = any(name.lower() == "content-length" for name, _ in headers)
        self._bodiless = self._head_only or status in _BODILESS or status < 200
        self._chunked = not sized and not self._bodiless and not self._http10
        if not sized and not self._bodiless:
            self.keep_alive = self.keep_alive and self._chunked
        self.keep_alive = self.keep_alive and not self._connection.draining
        lines = [f"HTTP/1.1 {status} {_phrase(status)}", *(f"{n}: {v}" for n, v in headers)]
        if self._chunked:
            lines.append("Transfer-Encoding: chunked")
        if not self.keep_alive:
            lines.append("Connection: close")
        self._head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        if self._head:
            self._connection.send(self._head)
            self._head = b""

    def _send(self, data: bytes) -> None:
        if self._head:
            data, self._head = self._head + data, b""
        if data:
            self._connection.send(data)

    async def write(self, data: bytes) -> None:
        """Send ``data``, waiting while the caller reads slower than it comes (at most the
        server's request time, past which the connection is cut)."""
        if not data or self._bodiless:
            return
        self._send(b"%x\r\n%b\r\n" % (len(data), data) if self._chunked else data)
        await self._connection.drained()

    def end(self) -> None:
        self._send(b"0\r\n\r\n" if self._chunked else b"")
        self.ended = True


@dataclass(slots=True)
class Request:
    """A request as read: its method, path (query left out), the headers the gateway reads, its
    body, and the :class:`Stream` its answer may be written to (``answer``) instead of returned.
    A streamed one also has its target as sent (path and query), every header in order, and its
    :class:`Body` in ``stream``."""

    method: str
    path: str
    headers: dict[bytes, bytes] = field(default_factory=dict)
    body: bytes = b""
    target: str = ""
    http10: bool = False
    all_headers: list[tuple[bytes, bytes]] | None = None
    stream: Body | None = None
    answer: Stream | None = None


@dataclass(slots=True)
class Response:
    """An answer: status, body, content type, and extra headers."""

    status: int
    body: bytes
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()


#: Serves a request: the :class:`Response` to send, or None once its :class:`Stream` has ended.
Handler = Callable[[Request], Awaitable[Response | None]]
#: The headers the gateway reads; the others are not kept.
WANTED = frozenset(
    {
        b"authorization",
        b"content-length",
        b"expect",
        b"content-type",
        # Whether a call's caller takes its answer as server-sent events.
        b"accept",
        # The caller's trace, which the call's span continues (W3C trace context).
        b"traceparent",
        b"tracestate",
        # Set by a replica that passed the request on to the one that works on its pool.
        b"agentpool-relayed-by",
    }
)


def error_body(reason: str, message: str) -> bytes:
    """The JSON of an error answer, ``{"error": {"reason", "message"}}``."""
    error = {"reason": reason, "message": message}
    return json.dumps({"error": error}, separators=(",", ":")).encode()


def _phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:  # a status an agent may send that Python does not name
        return "Status"


def _encode(response: Response, *, close: bool) -> bytes:
    lines = [
        f"HTTP/1.1 {response.status} {_phrase(response.status)}",
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
        self._serving: Request | None = None  # the request ``_task`` serves
        self._streamed: Request | None = None  # the streamed request being read, if any
        self._body_paused = False
        self._writable: asyncio.Event | None = None  # set while the caller keeps up
        # When the connection goes unless something happens first (loop time); the server's
        # sweep reads it, so a request costs no timer of its own.
        self.deadline = math.inf
        self._refused = False
        self._arriving = False  # a request has begun to arrive and is not whole yet

    # -- asyncio.Protocol -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        if self._server.draining:
            transport.abort()  # accepted as the listener closed (a TLS handshake ending late)
            return
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
        self._server.settle()
        self._disarm()
        for request, _ in [*self._ready, (self._streamed, False)]:
            if request is not None and request.stream is not None:
                request.stream.break_off()
        self._ready.clear()
        if self._writable is not None:
            self._writable.set()  # a writer waiting to drain finds the transport closing
        if self._task is not None:
            # The caller went away: a waiting checkout leaves the line, a call lets go.
            self._task.cancel()

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = asyncio.Event()
        self._writable.clear()

    def resume_writing(self) -> None:
        if self._writable is not None:
            self._writable.set()

    # -- httptools callbacks --------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url, self._head_bytes, self._body, self._body_size = b"", 0, [], 0
        self._request = None
        self._arriving = True
        self._arm(self._server.request_seconds)

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value))
        request = self._request
        if request is None:
            request = self._request = Request(method="", path="")
            if self._server.streams(self._url):
                request.all_headers = []
        key = name.lower()
        if key in WANTED:
            request.headers[key] = value
        if request.all_headers is not None:
            request.all_headers.append((name, value))

    def on_headers_complete(self) -> None:
        request = self._request
        if request is None:
            request = self._request = Request(method="", path="")
            if self._server.streams(self._url):
                request.all_headers = []
        request.method = self._parser.get_method().decode("latin-1")
        request.path = httptools.parse_url(self._url).path.decode("latin-1", "replace")
        request.http10 = self._parser.get_http_version() == "1.0"
        if request.all_headers is not None:
            self._begin_stream(request)
            return
        length = request.headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self._server.body_limit:
            self._refuse_body()
        elif request.headers.get(b"expect", b"").lower() == b"100-continue" and self._task is None:
            # Behind an answer in progress it would land inside it: the caller sends its body
            # after its own wait instead (RFC 9110 10.1.1).
            self._write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        if self._streamed is not None:
            assert self._streamed.stream is not None
            self._streamed.stream.feed(body)
            return
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
        self._arriving = False
        if self._streamed is not None:
            assert self._streamed.stream is not None
            self._streamed.stream.end()
            self._streamed = None
            if self._refused and self._transport is not None:
                self._transport.close()  # the rest of a body nobody reads, read to its end
            return
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

    def _begin_stream(self, request: Request) -> None:
        """A streamed request is served from its head on, its body read as it arrives; one
        behind an answer in progress waits, reading paused, as a plain request does."""
        request.target = self._url.decode("latin-1")
        expects = request.headers.get(b"expect", b"").lower() == b"100-continue"
        request.stream = Body(self, expects_continue=expects)
        self._streamed = request
        keep_alive = self._parser.should_keep_alive()
        request.answer = request.stream.answer = Stream(
            self, head_only=request.method == "HEAD", keep_alive=keep_alive, http10=request.http10
        )
        self._ready.append((request, keep_alive))
        if self._task is None:
            self._disarm()
            self._next()
        elif self._transport is not None:
            self._transport.pause_reading()

    def pause_for_body(self) -> None:
        if self._transport is not None and not self._body_paused:
            self._body_paused = True
            self._transport.pause_reading()

    def read_for_body(self) -> None:
        if self._transport is not None and self._body_paused:
            self._body_paused = False
            self._transport.resume_reading()

    def send(self, data: bytes) -> None:
        self._write(data)

    async def drained(self) -> None:
        """Return once the caller has read enough of what was sent; raise ``ConnectionError``
        once it has gone, or has read nothing for the server's request time (then the
        connection is cut)."""
        if self._transport is None or self._transport.is_closing():
            raise ConnectionError("the caller went away")
        if self._writable is not None and not self._writable.is_set():
            try:
                await asyncio.wait_for(self._writable.wait(), self.stall_seconds)
            except TimeoutError:
                self.cut()
                raise ConnectionError(
                    f"the caller read nothing of the answer for {self.stall_seconds:g} s"
                ) from None
            if self._transport.is_closing():
                raise ConnectionError("the caller went away")

    @property
    def stall_seconds(self) -> float:
        """How long a streamed request's caller may send or read nothing."""
        return self._server.request_seconds

    @property
    def draining(self) -> bool:
        return self._server.draining

    @property
    def busy(self) -> bool:
        """Whether a request is arriving, waiting or being served."""
        return self._task is not None or bool(self._ready) or self._arriving

    def doing(self) -> str:
        """What keeps the connection busy, for a log line."""
        if self._task is not None and self._serving is not None:
            return f"serving {self._serving.method} {self._serving.path}"
        if self._ready:
            return f"{len(self._ready)} request(s) waiting to be served"
        return "a request arriving" if self._arriving else "idle"

    @property
    def closing(self) -> bool:
        return self._transport is None or self._transport.is_closing()

    def cut(self) -> None:
        """End the connection at once: its caller stalled."""
        if self._transport is not None:
            self._transport.abort()

    # -- serving --------------------------------------------------------------------------------

    def _next(self) -> None:
        if not self._ready or self._transport is None:
            return
        request, keep_alive = self._ready.pop(0)
        self._serving = request
        if request.answer is None:
            request.answer = Stream(
                self,
                head_only=request.method == "HEAD",
                keep_alive=keep_alive,
                http10=request.http10,
            )
        self._task = self._loop.create_task(self._serve(request, keep_alive))

    async def _serve(self, request: Request, keep_alive: bool) -> None:
        answer = request.answer
        try:
            response = await self._server.handler(request)
        except asyncio.CancelledError:
            # Stopped unanswered (the caller gone, or the server ending it): the connection's
            # end is the only word left, never an idle connection that seems answered.
            self._task = None
            if self._transport is not None:
                self._transport.abort()
            raise
        except Exception as error:
            if not isinstance(error, ConnectionError):  # not the caller gone: the gateway's fault
                self._server.log_failure(request)
            body = error_body("InternalError", "the gateway failed on this request; see its log")
            response = Response(500, body)
        finally:
            self._task = None
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        # A draining server answers each request with the connection's end.
        keep_alive = keep_alive and not self._server.draining
        if answer is not None and answer.started:
            if not (response is None and answer.ended):
                # Broken off mid-answer: only the connection's end can tell the caller.
                transport.abort()
                return
            keep_alive = keep_alive and answer.keep_alive
        elif response is None:
            self._server.log_failure(request)
            body = error_body("InternalError", "the gateway gave this request no answer")
            response = Response(500, body)
        if request.stream is not None and not request.stream.ended:
            # A body not read to its end leaves the connection where no next request starts:
            # the answer goes, then the rest of the body is read and dropped a while before
            # closing, so the caller reads the answer rather than a reset.
            if response is not None:
                transport.write(_encode(response, close=True))
            request.stream.drop_rest()
            self._refused = True
            self._arm(self._server.linger_seconds)
            self._body_paused = False
            transport.resume_reading()
            return
        if response is not None:
            transport.write(_encode(response, close=not keep_alive))
        if not keep_alive:
            transport.close()
            return
        self._arm(self._server.idle_seconds)
        self._body_paused = False
        transport.resume_reading()
        self._next()

    def _count_head(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > HEAD_LIMIT:
            self._fail(431, f"the request head is over {HEAD_LIMIT} bytes")

    def _fail(self, status: int, message: str) -> None:
        """Answer a request that cannot be read, then close: what follows cannot be trusted. Behind
        an answer in progress, the connection is cut instead: an answer cannot go inside one."""
        if self._refused or self._transport is None:
            return
        self._refused = True
        if self._task is not None:
            self._transport.abort()
            return
        self._write(_encode(Response(status, error_body("Invalid", message)), close=True))
        self._transport.close()

    def _refuse_body(self) -> None:
        """Answer a body past the limit at once, then read and drop the rest of it (a while at
        most) before closing, so the caller reads the answer rather than a reset."""
        if self._refused or self._transport is None:
            return
        self._refused = True
        if self._task is not None:
            self._transport.abort()
            return
        self._write(_encode(self._server.too_large(), close=True))
        self._arm(self._server.linger_seconds)

    def _write(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    def _arm(self, seconds: float) -> None:
        self.deadline = self._loop.time() + seconds

    def _disarm(self) -> None:
        self.deadline = math.inf

    def close_idle(self) -> None:
        """Close the connection in good order if no request is on it."""
        if not self.busy and self._transport is not None:
            self._transport.close()

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
        streams: Callable[[bytes], bool] = lambda _: False,
        idle_seconds: float = IDLE_SECONDS,
        request_seconds: float = REQUEST_SECONDS,
        linger_seconds: float = LINGER_SECONDS,
        sweep_seconds: float = SWEEP_SECONDS,
    ) -> None:
        self.handler = handler
        #: Whether a request for this target (path and query, as sent) is streamed.
        self.streams = streams
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
        #: Set by :meth:`drain`: no connection is taken, and none is kept alive.
        self.draining = False
        self._settled = asyncio.Event()

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

    def settle(self) -> None:
        """Called as a connection goes: once draining and no request is left, :meth:`drain`
        returns."""
        if self.draining and not any(connection.busy for connection in self.connections):
            self._settled.set()

    async def drain(self, seconds: float, *, linger: float = 0.0) -> None:
        """Take no more connections and let the requests in progress end, each answer followed
        by the connection's end (said in its head, ``Connection: close``, unless the head had
        gone before), for up to ``seconds``; :meth:`stop` ends
        what is left. A pod going does this: the Service stops sending to it, and what it was
        already serving is not cut. Kept-alive connections stay open for ``linger`` at least
        (within ``seconds``), so a client that sends on one as the drain begins gets the
        handler's answer (the gateway's: 503, send again) rather than a closed socket, and are
        closed in good order then; the handler tells new requests from those in progress by
        :attr:`draining`."""
        if self._server is None:
            return
        loop = asyncio.get_running_loop()
        until = loop.time() + (0.0 if self.draining else min(linger, seconds))
        self._server.close()
        self.draining = True
        self.settle()
        try:
            await asyncio.wait_for(self._settled.wait(), seconds)
        except TimeoutError:
            busy = sorted(c.doing() for c in self.connections if c.busy)
            log.warning(
                "drained for %gs, %d request(s) still unanswered, cut as the gateway stops: %s",
                seconds,
                len(busy),
                "; ".join(busy),
            )
        if self.connections and loop.time() < until:
            await asyncio.sleep(until - loop.time())
        # Those left idle are closed now: their clients see them end and connect again (refused,
        # so sent elsewhere), rather than send on them and meet the stop's reset, unanswered.
        for connection in list(self.connections):
            connection.close_idle()

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
