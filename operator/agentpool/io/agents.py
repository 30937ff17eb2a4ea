"""The operator's side of the agent protocol: the one module that talks to agents over HTTP.

The PoolRun engine invokes items through ``AgentClient.invoke``, and sends them to an HTTP pool's
agents as requests of their own through ``AgentClient.send``; the broker asks ``status`` to
rebuild who is busy after a restart and ``reset`` between items when a pool wants it; a lease
hands its agent its own token with ``bind`` and takes it back with ``unbind``. Every answer
comes back as a value (``InvokeResult``, ``AgentStatus``, ``BindAnswer``, ``bool``), never an
exception,
so callers decide on data: ``InvokeResult.lost`` means the agent's state is unknown (the call
timed out or the connection broke) and the agent must be retired, not reused.

This module sits on the hot path of every item, so ``invoke`` on a plain ``http://`` endpoint
writes a prebuilt request on a kept-alive connection of :mod:`agentpool.wire.connections` (a third
of the CPU of an aiohttp request, and the operator is CPU-bound on small items); everything else
goes through one ``ClientSession`` with a large keep-alive connection pool. A request forwarded
to a plain ``http://`` agent (``forward``) takes the same kept connections, its answer streamed.
URLs, request heads and timeouts are built once per endpoint and value, and each body is
serialised once. ``bind`` and ``unbind`` go over the same kept connections as ``invoke``. The
pool's token goes into the ``Authorization`` header only, and a lease's token into the ``/bind``
body only: neither into a result, a message or a log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import AsyncIterable, AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from yarl import URL

from agentpool import tracing
from agentpool.wire import protocol
from agentpool.wire.connections import Answer, ClosedUnanswered, WireError, WirePool
from agentpool.wire.envelopes import EnvelopeBody

#: Connections kept to agents across all pools; a pool of hundreds must not queue on the client.
DEFAULT_CONNECTIONS = 1024
#: How long a connection to an HTTP pool's agent is kept idle: under the keep-alive of the
#: servers agents are built on (gunicorn 2 s, uvicorn, Node and Apache 5 s), so the gateway
#: drops one before the agent would, rather than send a request as the agent closes it.
FORWARD_IDLE_SECONDS = 1.5
_MESSAGE_BODY_CHARS = 200
#: What a request that got no answer raises (besides TimeoutError): the agent's state is unknown.
_NO_ANSWER = (aiohttp.ClientError, OSError, asyncio.IncompleteReadError, WireError, ValueError)
# Envelopes are encoded compactly by one encoder (json.dumps would build one per call).
_COMPACT = json.JSONEncoder(separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class InvokeResult:
    """What one ``POST /invoke`` came to.

    ``ok`` with ``output`` on 200 (or on 202 for a cast, with no output); otherwise ``reason`` is
    the agent's (``HandlerError``, ``Busy``, ``Draining``, ``NotReady``, ``Unauthorized``,
    ``BadRequest``) or the client's own (``CallTimeout``, ``AgentLost``, ``BadResponse``) and
    ``message`` a sentence. ``status_code`` is None when no HTTP answer came.
    """

    ok: bool
    output: Any = None
    reason: str = ""
    message: str = ""
    status_code: int | None = None
    lost: bool = False


class ForwardBroken(Exception):
    """A forwarded request's agent did not answer whole: unreachable, too slow, or gone mid-way.
    ``reason`` is the protocol's (``AgentLost`` or ``CallTimeout``); the agent's state is
    unknown, but when ``lost`` is False: its kept connection closed unanswered as the request
    went, which a well agent's keep-alive does."""

    def __init__(self, reason: str, message: str, *, lost: bool = True) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.lost = lost


@dataclass(frozen=True, slots=True)
class Forwarding:
    """An agent's answer to a forwarded request as it comes: its status, its headers as sent,
    and its body in the pieces the agent sent (undecoded)."""

    status: int
    headers: Sequence[tuple[bytes, bytes]]
    body: AsyncIterator[bytes]


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    """An HTTP pool's agent's answer to a request the operator sent it, read whole (or up to
    the caller's limit: ``whole`` is False when the body ran past it)."""

    status: int
    content_type: str
    body: bytes
    whole: bool = True


@dataclass(frozen=True, slots=True)
class AgentStatus:
    """An agent's own account of itself, from ``GET /status``.

    ``busy`` means at least one of its ``slots`` is busy; ``busy_slots`` counts them and
    ``items`` names the items they serve (an agent of one slot that predates slots reports only
    ``current``, which stands for both).
    """

    busy: bool
    current: Any
    uses: int
    ready: bool
    draining: bool
    slots: int = 1
    busy_slots: int = 0
    items: tuple[Any, ...] = ()
    #: The lease the agent is bound to, if any.
    lease: str | None = None


def parse_status(data: Any) -> AgentStatus | None:
    """The ``GET /status`` body as an :class:`AgentStatus`, or None when it is not one."""
    if not isinstance(data, dict) or not isinstance(data.get("busy"), bool):
        return None
    busy, current = data["busy"], data.get("current")
    listed = data.get("items")
    if isinstance(listed, list):
        items = tuple(listed)
    else:
        items = (current,) if busy and current is not None else ()
    try:
        uses = int(data.get("uses", 0))
        slots = max(1, int(data.get("slots", 1)))
        busy_slots = max(0, int(data.get("busySlots", max(len(items), int(busy)))))
    except (TypeError, ValueError, OverflowError):
        return None
    return AgentStatus(
        busy=busy or busy_slots > 0,
        current=current,
        uses=uses,
        ready=bool(data.get("ready", True)),
        draining=bool(data.get("draining", False)),
        slots=slots,
        busy_slots=max(busy_slots, int(busy)),
        items=items,
        lease=str(data["lease"]) if data.get("lease") else None,
    )


@dataclass(frozen=True, slots=True)
class BindAnswer:
    """What one ``POST /bind`` came to: ``ok``, or the HTTP status (None when no answer came)
    with the agent's reason and message, or the client's own (``AgentLost``, ``CallTimeout``)."""

    ok: bool
    status_code: int | None = None
    reason: str = ""
    message: str = ""


@dataclass(frozen=True, slots=True)
class _Urls:
    base: str
    status: URL
    reset: URL
    healthz: URL
    wire: tuple[str, int] | None
    """(host, port) when a POST may go over :mod:`agentpool.wire.connections`: plain http."""


@functools.lru_cache(maxsize=4096)
def _urls(endpoint: str) -> _Urls:
    base = endpoint if "://" in endpoint else f"http://{endpoint}"
    base = base.rstrip("/")
    return _Urls(
        base=base,
        status=URL(base + protocol.STATUS_PATH),
        reset=URL(base + protocol.RESET_PATH),
        healthz=URL(base + protocol.HEALTHZ_PATH),
        wire=_wire_target(URL(base)),
    )


def _wire_target(url: URL) -> tuple[str, int] | None:
    if url.scheme != "http" or not url.raw_host or url.port is None:
        return None
    return url.raw_host, url.port


@functools.lru_cache(maxsize=4096)
def _post_head(endpoint: str, path: str, token: str, cast: bool) -> bytes:
    """The request line and headers of a ``POST`` to ``path``, all but Content-Length."""
    url = URL(_urls(endpoint).base + path)
    lines = [
        f"POST {url.raw_path_qs} HTTP/1.1",
        f"Host: {url.raw_authority}",
        f"Authorization: Bearer {token}",
        "Content-Type: application/json",
    ]
    if cast:
        lines.append(f"{protocol.PREFER_HEADER}: {protocol.RESPOND_ASYNC}")
    return ("\r\n".join(lines) + "\r\n").encode("latin-1")


@functools.lru_cache(maxsize=256)
def _timeout(seconds: float) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=seconds)


def _trace_lines(trace: dict[str, str]) -> bytes:
    """The trace context's header lines; a value that would break the head is left out (the
    propagator writes plain tokens, so this is only a guard)."""
    lines = [
        f"{name}: {value}\r\n"
        for name, value in trace.items()
        if "\r" not in value and "\n" not in value and value.isascii()
    ]
    return "".join(lines).encode("ascii")


#: The headers aiohttp adds on its own, left out unless the caller sent them.
_AUTO_HEADERS = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")


@functools.lru_cache(maxsize=256)
def _forward_timeout(seconds: float) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=None, connect=seconds, sock_read=seconds)


def _is_event_stream(headers: Sequence[tuple[bytes, bytes]]) -> bool:
    return any(
        name.lower() == b"content-type"
        and value.split(b";")[0].strip().lower() == protocol.EVENT_STREAM.encode()
        for name, value in headers
    )


def _broken_result(broken: ForwardBroken) -> InvokeResult:
    """No whole answer came: the agent's state is unknown, so it is retired."""
    return InvokeResult(ok=False, reason=broken.reason, message=broken.message, lost=True)


def _no_answer(error: BaseException) -> str:
    return f"the agent's connection broke: {type(error).__name__}: {error}".rstrip(": ")


async def _pieces(body: AsyncIterable[bytes], timeout: float) -> AsyncIterator[bytes]:
    """The answer's body as it arrives, from either client; :class:`ForwardBroken` when it
    stops short or stalls."""
    try:
        async for piece in body:
            yield piece
    except TimeoutError:
        raise ForwardBroken(
            protocol.CALL_TIMEOUT, f"the agent sent nothing more for {timeout:g} s"
        ) from None
    except _NO_ANSWER as error:
        raise ForwardBroken(protocol.AGENT_LOST, _no_answer(error)) from None


#: The methods whose request may be sent twice to the same effect (RFC 9110 9.2.2).
_IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})
#: Headers by which a caller says its request may go twice.
_IDEMPOTENCY_HEADERS = frozenset({"idempotency-key", "x-idempotency-key"})


def _idempotent(method: str, headers: Sequence[tuple[str, str]]) -> bool:
    """The request may go again when its method says so, or its caller gave it an
    ``Idempotency-Key``."""
    return method in _IDEMPOTENT_METHODS or any(
        name.lower() in _IDEMPOTENCY_HEADERS for name, _ in headers
    )


#: Methods whose request carries a body by its meaning: sent with ``Content-Length: 0`` when
#: the caller sent none, as clients do.
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def _forward_head(
    wire: tuple[str, int],
    method: str,
    target: str,
    headers: Sequence[tuple[str, str]],
    *,
    has_body: bool,
) -> tuple[bytes, bool]:
    """A forwarded request's line and headers (without the blank line that ends them), and
    whether its own ``Content-Length`` sizes its body; one without is sent chunked."""
    host, port = wire
    sized = any(name.lower() == "content-length" for name, _ in headers)
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    lines = [f"{method} {target} HTTP/1.1", f"Host: {authority}"]
    lines += [f"{name}: {value}" for name, value in headers]
    if not has_body and not sized and method in _BODY_METHODS:
        lines.append("Content-Length: 0")
    return ("\r\n".join(lines) + "\r\n").encode("latin-1"), sized


async def _read_up_to(response: aiohttp.ClientResponse, limit: int) -> tuple[bytes, bool]:
    """The answer's body, and whether it is whole: past ``limit`` bytes it is cut there (and the
    connection closed, the rest unread)."""
    pieces: list[bytes] = []
    size = 0
    async for piece in response.content.iter_chunked(64 * 1024):
        pieces.append(piece)
        size += len(piece)
        if size > limit:
            response.close()
            return b"".join(pieces)[:limit], False
    return b"".join(pieces), True


def _headers(token: str, *, cast: bool = False) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    if cast:
        headers[protocol.PREFER_HEADER] = protocol.RESPOND_ASYNC
    return headers


class AgentClient:
    """Calls agents over one shared, pooled ``ClientSession``; use one per operator process.

    Pass a ``session`` to share one you own, or let the client create its own on first use (in
    the running loop) and close it in ``close()``. Also an async context manager.
    """

    def __init__(
        self,
        session: aiohttp.ClientSession | None = None,
        *,
        connections: int = DEFAULT_CONNECTIONS,
    ) -> None:
        self._session = session
        self._owns_session = session is None
        self._connections = connections
        self._wire = WirePool()
        self._forwards = WirePool(idle_seconds=FORWARD_IDLE_SECONDS)

    async def __aenter__(self) -> AgentClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    def _client(self) -> aiohttp.ClientSession:
        session = self._session
        if session is None or (self._owns_session and session.closed):
            connector = aiohttp.TCPConnector(limit=self._connections, limit_per_host=0)
            session = aiohttp.ClientSession(
                connector=connector, cookie_jar=aiohttp.DummyCookieJar(), trust_env=False
            )
            self._session = session
        return session

    async def close(self) -> None:
        """Close the session if this client created it; calls after this open a new one."""
        self._wire.close()
        self._forwards.close()
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    @contextlib.asynccontextmanager
    async def forward(
        self,
        endpoint: str,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: bytes | AsyncIterable[bytes] | None,
        *,
        timeout: float,
    ) -> AsyncIterator[Forwarding]:
        """Send ``method`` ``target`` (path and query, as the caller sent them) to the agent at
        ``endpoint`` with ``headers`` and ``body`` streamed as they come; the answer streams
        while the context is open. ``timeout`` bounds the wait for the answer's head and each
        wait for more of it; a failure of the agent's side raises :class:`ForwardBroken`.
        Leaving early closes the agent's connection, which tells it the caller went away."""
        urls = _urls(endpoint)
        if urls.wire is not None:
            async with self._forward_wire(
                urls.wire, method, target, headers, body, timeout=timeout
            ) as answer:
                yield answer
            return
        url = URL(urls.base + target, encoded=True)
        given = {name.lower() for name, _ in headers}
        try:
            response = await self._client().request(
                method,
                url,
                headers=list(headers),
                data=body,
                skip_auto_headers=[h for h in _AUTO_HEADERS if h.lower() not in given],
                allow_redirects=False,
                auto_decompress=False,
                timeout=_forward_timeout(timeout),
            )
        except TimeoutError:
            raise ForwardBroken(
                protocol.CALL_TIMEOUT, f"the agent did not answer within {timeout:g} s"
            ) from None
        except _NO_ANSWER as error:
            raise ForwardBroken(protocol.AGENT_LOST, _no_answer(error)) from None
        whole = False
        try:
            body = _pieces(response.content.iter_any(), timeout)
            yield Forwarding(response.status, response.raw_headers, body)
            whole = True
        finally:
            if whole:
                response.release()
            else:
                response.close()

    @contextlib.asynccontextmanager
    async def _forward_wire(
        self,
        wire: tuple[str, int],
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: bytes | AsyncIterable[bytes] | None,
        *,
        timeout: float,
    ) -> AsyncIterator[Forwarding]:
        """:meth:`forward` to a plain ``http://`` agent, over the kept connections of
        :mod:`agentpool.wire.connections`: the request's head leaves with its body's first piece,
        and no header is added but ``Host`` (and the framing the body needs)."""
        head, sized = _forward_head(wire, method, target, headers, has_body=body is not None)
        answered = False
        try:
            async with self._forwards.exchange(
                *wire,
                head,
                body,
                sized=sized,
                timeout=timeout,
                bodiless=method == "HEAD",
                idempotent=_idempotent(method, headers),
            ) as answer:
                answered = True
                yield Forwarding(answer.status, answer.headers, _pieces(answer.pieces, timeout))
        except TimeoutError:
            if answered:
                raise  # the caller's own, from the body of its context
            raise ForwardBroken(
                protocol.CALL_TIMEOUT, f"the agent did not answer within {timeout:g} s"
            ) from None
        except ClosedUnanswered:
            raise ForwardBroken(
                protocol.AGENT_LOST,
                f"the agent closed its kept connection as the {method} went, unanswered; it "
                "may or may not have acted on it, so the gateway did not send it twice: send it "
                "again if it may go twice (an Idempotency-Key header lets the gateway do so)",
                lost=False,
            ) from None
        except _NO_ANSWER as error:
            if answered:
                raise
            raise ForwardBroken(protocol.AGENT_LOST, _no_answer(error)) from None

    @contextlib.asynccontextmanager
    async def invoke_streamed(
        self, endpoint: str, token: str, body: bytes, *, timeout: float
    ) -> AsyncIterator[Forwarding | InvokeResult]:
        """``POST /invoke`` asking for a streamed answer (``Accept: text/event-stream``): the
        events as they come while the context is open when the agent streams, else what its
        whole answer came to, read as :meth:`invoke` reads it (an agent may answer JSON to any
        call). ``timeout`` bounds the wait for the answer's head and for each piece of it."""
        headers = [
            *_headers(token).items(),
            (protocol.ACCEPT_HEADER, protocol.EVENT_STREAM),
            *tracing.inject({}).items(),
        ]
        opened = contextlib.AsyncExitStack()
        async with opened:
            try:
                answer = await opened.enter_async_context(
                    self.forward(
                        endpoint, "POST", protocol.INVOKE_PATH, headers, body, timeout=timeout
                    )
                )
            except ForwardBroken as broken:
                yield _broken_result(broken)
                return
            if answer.status == 200 and _is_event_stream(answer.headers):
                yield answer
                return
            try:
                raw = b"".join([piece async for piece in answer.body])
            except ForwardBroken as broken:
                result = _broken_result(broken)
            else:
                result = _invoke_result(
                    endpoint, answer.status, raw, cast=False, path=protocol.INVOKE_PATH
                )
            yield result

    async def invoke(
        self,
        endpoint: str,
        token: str,
        envelope: EnvelopeBody | bytes,
        *,
        timeout: float,
        cast: bool = False,
    ) -> InvokeResult:
        """Hand ``envelope`` (or its JSON, already encoded) to the agent at ``endpoint``
        (``http://host:port``) and wait.

        With ``cast`` the agent answers 202 at once and works in the background; poll ``status``
        to see it idle again.
        """
        if isinstance(envelope, bytes):
            body = envelope
        else:
            try:
                body = _COMPACT.encode(envelope).encode()
            except (TypeError, ValueError) as exc:
                return InvokeResult(
                    ok=False,
                    reason=protocol.BAD_REQUEST,
                    message=f"the envelope is not JSON: {exc}",
                )
        # The trace goes on in the agent: the calling span's context, in the W3C headers.
        trace = tracing.inject({})
        answer = await self._post(
            endpoint, protocol.INVOKE_PATH, token, body, timeout, cast=cast, trace=trace
        )
        if isinstance(answer, InvokeResult):
            return answer
        return _invoke_result(
            endpoint, answer.status, answer.body, cast=cast, path=protocol.INVOKE_PATH
        )

    async def send(
        self,
        endpoint: str,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: bytes,
        *,
        timeout: float,
        limit: int,
    ) -> HttpAnswer | InvokeResult:
        """Send ``method`` ``target`` (path and query) with ``headers`` and ``body`` to the agent
        of an HTTP pool at ``endpoint``, with no token (an HTTP pool's agents have none), and
        read the answer, at most ``limit`` bytes of its body. A lost :class:`InvokeResult` when
        no whole answer came within ``timeout``. Redirects are the agent's answer, not followed."""
        url = URL(_urls(endpoint).base + target)
        # The trace goes on in the agent, when it reads the W3C headers.
        sent = [*headers, *tracing.inject({}).items()]
        try:
            async with (
                asyncio.timeout(timeout),
                self._client().request(
                    method, url, headers=sent, data=body, allow_redirects=False
                ) as response,
            ):
                content, whole = await _read_up_to(response, limit)
                content_type = response.headers.get("Content-Type", "")
                return HttpAnswer(response.status, content_type, content, whole)
        except (TimeoutError, *_NO_ANSWER) as exc:
            return _unanswered(endpoint, exc, timeout=timeout)

    async def _post(
        self,
        endpoint: str,
        path: str,
        token: str,
        body: bytes,
        timeout: float,
        *,
        cast: bool,
        trace: dict[str, str] | None = None,
    ) -> Answer | InvokeResult:
        """``POST`` ``body`` to ``path``: over a kept connection of
        :mod:`agentpool.wire.connections` to a plain http endpoint, else through aiohttp. A lost
        result when no answer came. ``trace`` holds the trace context's headers, if any."""
        target = _urls(endpoint).wire
        try:
            async with asyncio.timeout(timeout):
                if target is not None:
                    head = _post_head(endpoint, path, token, cast)
                    if trace:
                        head += _trace_lines(trace)
                    return await self._wire.request(target[0], target[1], head, body)
                url, headers = URL(_urls(endpoint).base + path), _headers(token, cast=cast)
                if trace:
                    headers.update(trace)
                async with self._client().post(url, data=body, headers=headers) as response:
                    return Answer(response.status, await response.read())
        except (TimeoutError, *_NO_ANSWER) as exc:
            return _unanswered(endpoint, exc, timeout=timeout)

    async def bind(
        self,
        endpoint: str,
        token: str,
        *,
        lease: str,
        lease_token: str,
        expire_time: str,
        context: Any,
        timeout: float = 30.0,
    ) -> BindAnswer:
        """Hand the agent ``lease``'s own token, its expiry and its context (``POST /bind`` with
        the pool's ``token``); the same lease again moves the expiry."""
        body = {"lease": lease, "token": lease_token, "expireTime": expire_time, "context": context}
        data = _COMPACT.encode(body).encode()
        answer = await self._post(endpoint, protocol.BIND_PATH, token, data, timeout, cast=False)
        if isinstance(answer, InvokeResult):
            return BindAnswer(ok=False, reason=answer.reason, message=answer.message)
        if answer.status == 200:
            return BindAnswer(ok=True, status_code=200)
        error = _invoke_result(
            endpoint, answer.status, answer.body, cast=False, path=protocol.BIND_PATH
        )
        return BindAnswer(False, answer.status, error.reason, error.message)

    async def unbind(self, endpoint: str, token: str, *, lease: str, timeout: float = 30.0) -> bool:
        """Take ``lease``'s token and context back from the agent (``POST /unbind``); False when
        it failed to (its unbind or reset raised) or gave no answer: retire it."""
        data = _COMPACT.encode({"lease": lease}).encode()
        answer = await self._post(endpoint, protocol.UNBIND_PATH, token, data, timeout, cast=False)
        return isinstance(answer, Answer) and answer.status == 200

    async def status(
        self, endpoint: str, token: str, *, timeout: float = 5.0
    ) -> AgentStatus | None:
        """The agent's ``/status``, or None if it cannot be had (unreachable, refused, garbled)."""
        try:
            async with self._client().get(
                _urls(endpoint).status, headers=_headers(token), timeout=_timeout(timeout)
            ) as response:
                if response.status != 200:
                    return None
                data = json.loads(await response.read())
            return parse_status(data)
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError, TypeError, KeyError):
            return None

    async def reset(self, endpoint: str, token: str, *, timeout: float = 30.0) -> bool:
        """Ask the agent to return to a fresh state; False means it failed and should be retired.

        An agent without a reset function (501) counts as reset: it declares it keeps no state.
        """
        try:
            async with self._client().post(
                _urls(endpoint).reset, headers=_headers(token), timeout=_timeout(timeout)
            ) as response:
                await response.read()
                return response.status in (200, 501)
        except (TimeoutError, aiohttp.ClientError, OSError):
            return False

    async def ready(self, endpoint: str, *, timeout: float = 5.0) -> bool:
        """Whether ``/healthz`` answers 200: the agent's start-up is done and it is not draining."""
        try:
            async with self._client().get(
                _urls(endpoint).healthz, timeout=_timeout(timeout)
            ) as response:
                await response.read()
                return response.status == 200
        except (TimeoutError, aiohttp.ClientError, OSError):
            return False


def _unanswered(endpoint: str, exc: BaseException, *, timeout: float) -> InvokeResult:
    """A call that got no answer, in time (``exc`` is a TimeoutError) or at all (its connection
    failed or broke): the agent's state is unknown."""
    if isinstance(exc, TimeoutError):
        reason = protocol.CALL_TIMEOUT
        message = f"the agent at {endpoint} gave no answer within {timeout:g}s"
    else:
        reason = protocol.AGENT_LOST
        message = f"lost the agent at {endpoint}: {_connection_failure(exc)}"
    return InvokeResult(ok=False, reason=reason, message=message, lost=True)


def _invoke_result(
    endpoint: str, status: int, raw: bytes, *, cast: bool, path: str
) -> InvokeResult:
    """What the agent's answer to ``POST path`` came to; one that is not the protocol's JSON is a
    ``BadResponse`` naming the request."""
    if status == 202 and cast:
        return InvokeResult(ok=True, status_code=status)
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if status == 200 and isinstance(data, dict) and "output" in data:
        return InvokeResult(ok=True, output=data["output"], status_code=status)
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and isinstance(error.get("reason"), str):
        return InvokeResult(
            ok=False,
            reason=error["reason"],
            message=str(error.get("message", "")),
            status_code=status,
        )
    text = raw[:_MESSAGE_BODY_CHARS].decode("utf-8", "replace")
    return InvokeResult(
        ok=False,
        reason=protocol.BAD_RESPONSE,
        message=protocol.outside_protocol(endpoint, f"POST {path}", status, text),
        status_code=status,
    )


def _connection_failure(exc: BaseException) -> str:
    """Why the connection failed, in words (aiohttp's own text can be opaque)."""
    if isinstance(exc, aiohttp.ServerDisconnectedError | asyncio.IncompleteReadError):
        return "the connection closed before an answer came (the agent may have exited)"
    if isinstance(exc, aiohttp.ClientConnectorError):
        cause = exc.os_error
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused (nothing is listening; the agent may have exited)"
        return f"cannot connect: {cause.strerror or cause}"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (nothing is listening; the agent may have exited)"
    if isinstance(exc, ConnectionResetError | BrokenPipeError | aiohttp.ClientOSError):
        return f"the connection was reset ({exc})"
    if isinstance(exc, WireError | ValueError):
        return f"the answer is not HTTP/1.1: {exc}"
    if isinstance(exc, OSError):
        return f"cannot connect: {exc.strerror or exc}"
    return f"{type(exc).__name__}: {exc}"
