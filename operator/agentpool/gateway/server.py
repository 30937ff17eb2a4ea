"""The gateway's endpoints: ``POST /v1/namespaces/{ns}/agentpools/{pool}/call`` and ``/cast``,
and any request to ``.../agentpools/{pool}/proxy/{path}``, passed on to an agent.

Each request goes through the same steps: the path names the pool and the verb; the caller's
bearer token is checked (:class:`~agentpool.gateway.access.Access`); the body is validated into a
:class:`~agentpool.api.gateway.GatewayRequest` with its envelope encoded
(:mod:`~agentpool.gateway.requests`); then the operator's :class:`Calls` hands the item to an
agent. A call answers ``200 {"output", "agent"}``, a cast ``202 {"agent"}``; anything else is
``{"error": {"reason", "message"}}`` with its status (:mod:`~agentpool.gateway.errors`).
A forwarded request is checked as the API server checks ``pods/proxy`` (its method's verb on
``agentpools/proxy``), read by :mod:`~agentpool.gateway.forwarding`, and handed to ``Calls``
with its body still arriving; the agent's answer streams back as it comes, with the header
``Agentpool-Agent`` naming the agent.
A caller's W3C ``traceparent`` is continued by the call's span, when traces are on.
``GET /healthz`` says the server runs; ``GET /readyz`` says whether this operator serves calls
now (a standby replica does not), for the Service's readiness. Neither needs a token.

The HTTP/1.1 underneath is :mod:`agentpool.gateway.http`: a caller that disconnects has its
request cancelled at once, so a waiting one leaves the pool's line and a call mid-way lets its
agent go back once the item ends. :mod:`agentpool.handlers.gatewaysetup` starts it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import ssl
import time
from collections.abc import AsyncIterable, Callable, Iterable
from typing import Final

from agentpool import metrics, tracing
from agentpool.api.gateway import (
    AGENT_HEADER,
    LEASES,
    PATH_PREFIX,
    PROXY,
    PROXY_VERBS,
    SUBRESOURCES,
    VERBS,
    GatewayVerb,
)
from agentpool.api.reasons import GatewayReason
from agentpool.gateway import forwarding
from agentpool.gateway.access import Access
from agentpool.gateway.contracts import CallAnswer, Calls, Peers
from agentpool.gateway.errors import GatewayError, from_agent, too_large, unavailable
from agentpool.gateway.http import HttpServer, Request, Response, Stream
from agentpool.gateway.requests import envelope, parse_request
from agentpool.settings import GatewaySettings
from agentpool.wire import events, protocol

log = logging.getLogger(__name__)

# Outputs come from the agent's JSON; a number JSON cannot carry (1e400) is the agent's fault.
_STRICT = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
#: The path's parts before the namespace, and between it and the pool.
_PREFIX: Final = tuple(PATH_PREFIX.strip("/").split("/"))
_KIND: Final = "agentpools"


#: How soon a call another replica did not serve is passed on again, to where its pool is now.
RELAY_AGAIN_SECONDS: Final = 0.1
#: What a forwarded request's method may be: those RBAC has a verb for.
_FORWARDED_METHODS: Final = ", ".join(PROXY_VERBS)


def _answer(error: GatewayError, *, allow: str = "POST") -> Response:
    headers: list[tuple[str, str]] = []
    if error.retry_after is not None:
        headers.append(("Retry-After", str(max(1, math.ceil(error.retry_after)))))
    if error.status == 405:
        headers.append(("Allow", allow))
    return Response(error.status, error.body(), headers=tuple(headers))


class _Answer:
    """A forwarded request's answer, streamed to its caller with the agent's end-to-end
    headers and the name of the agent."""

    def __init__(self, stream: Stream) -> None:
        self._stream = stream

    @property
    def started(self) -> bool:
        return self._stream.started

    @property
    def gone(self) -> bool:
        return self._stream.gone

    def start(self, status: int, headers: Iterable[tuple[bytes, bytes]], *, agent: str) -> None:
        self._stream.start(status, [*forwarding.passed_back(headers), (AGENT_HEADER, agent)])

    async def write(self, data: bytes) -> None:
        await self._stream.write(data)

    def end(self) -> None:
        self._stream.end()


def _route(path: str) -> tuple[str, str, str] | None:
    """(namespace, pool, verb) of a gateway path, or None for any other path."""
    parts = path.strip("/").split("/")
    if len(parts) != 6 or tuple(parts[:2]) != _PREFIX or parts[3] != _KIND:
        return None
    namespace, pool, verb = parts[2], parts[4], parts[5]
    return (namespace, pool, verb) if namespace and pool else None


class GatewayServer:
    """The gateway, listening once :meth:`start` returns, until :meth:`stop`."""

    def __init__(
        self,
        *,
        calls: Calls,
        access: Access,
        settings: GatewaySettings,
        tls: ssl.SSLContext | None,
        ready: Callable[[], bool] = lambda: True,
        peers: Peers | None = None,
    ) -> None:
        self._calls = calls
        self._peers = peers
        self._settings = settings
        self._access = access
        self._tls = tls
        self._ready = ready
        self._http = HttpServer(
            self._respond,
            body_limit=settings.body_limit_bytes,
            too_large=lambda: self._refused(too_large(settings.body_limit_bytes), verb="call"),
            tls=tls,
            on_failure=lambda request: log.exception("gateway %s %s", request.method, request.path),
            streams=forwarding.is_forward,
        )
        self._host = "127.0.0.1"
        self._port = 0

    async def start(self, host: str, port: int) -> None:
        """Listen on ``host``:``port`` (0: a free port, see :attr:`port`)."""
        self._port = await self._http.start(host, port)
        self._host = host

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        """Where the gateway listens, as a client on this machine reaches it."""
        host = "127.0.0.1" if self._host in ("0.0.0.0", "", "::") else self._host
        scheme = "https" if self._tls is not None else "http"
        return f"{scheme}://{host}:{self._port}"

    async def drain(self, seconds: float) -> None:
        """Take nothing new, and let what is being served end, for up to ``seconds``: a
        request that arrives meanwhile is answered 503 Unavailable, send it again."""
        linger = self._settings.drain_linger_seconds
        await self._http.drain(seconds, linger=linger)

    async def stop(self) -> None:
        await self._http.stop()

    async def _respond(self, request: Request) -> Response | None:
        if self._http.draining and request.path not in ("/healthz", "/readyz"):
            # Stopping: what it serves ends, nothing new begins. A replica that passed the
            # request on sends it again where its pool is now; a caller, after Retry-After.
            message = "this operator is stopping: send the request again"
            return _answer(unavailable(message, retry_after=self._settings.retry_after_seconds))
        if request.stream is not None and request.answer is not None:
            return await self._forward(request, request.answer)
        route = _route(request.path)
        if route is None:
            return self._other(request)
        namespace, pool, verb_text = route
        if verb_text not in VERBS:
            return self._not_found(request.path)
        verb: GatewayVerb = "call" if verb_text == "call" else "cast"
        if request.method != "POST":
            message = f"{request.method} is not served here: send POST with a JSON body"
            return _answer(GatewayError(405, GatewayReason.METHOD_NOT_ALLOWED, message))
        authorization = request.headers.get(b"authorization", b"").decode("latin-1")
        try:
            await self._access.admit(
                authorization,
                verb="create",
                subresource=SUBRESOURCES[verb],
                namespace=namespace,
                pool=pool,
            )
            call = parse_request(request.body)
            if await self._relayed(request, namespace, pool, request.body):
                return None
            streamed = None
            accept = request.headers.get(b"accept", b"").decode("latin-1")
            if verb == "call" and request.answer is not None and events.wants_stream(accept):
                streamed = _Answer(request.answer)
            with tracing.continued(_trace_headers(request)):
                answer = await self._calls.serve(
                    namespace, pool, call, envelope(call), verb=verb, answer=streamed
                )
        except GatewayError as error:
            if error.status in (400, 401, 403):
                return self._refused(error, verb=verb)
            return _answer(error)
        if answer.streamed:
            return None
        return self._reply(answer, verb=verb)

    async def _forward(self, request: Request, stream: Stream) -> Response | None:
        """Pass a request on to an agent of its pool and stream the answer back; None once it
        has been."""
        route = forwarding.route(request.target)
        if route is None:
            return self._not_found(request.path)
        verb = PROXY_VERBS.get(request.method)
        if verb is None:
            message = f"{request.method} is not forwarded: send one of {_FORWARDED_METHODS}"
            error = GatewayError(405, GatewayReason.METHOD_NOT_ALLOWED, message)
            return _answer(error, allow=_FORWARDED_METHODS)
        authorization = request.headers.get(b"authorization", b"").decode("latin-1")
        answer = _Answer(stream)
        try:
            await self._access.admit(
                authorization,
                verb=verb,
                resource=route.kind,
                subresource=PROXY,
                namespace=route.namespace,
                pool=route.name,
            )
            assert request.all_headers is not None
            assert request.stream is not None
            whole = request.stream.whole()
            body = request.stream if whole is None else whole
            lease = route.name if route.kind == LEASES else None
            if await self._relayed(request, route.namespace, route.name, body, lease=lease):
                return None
            forwarded = forwarding.forwarded(
                request.method,
                route.target,
                request.all_headers,
                request.stream if whole is None else whole,
            )
            with tracing.continued(_trace_headers(request)):
                if route.kind == LEASES:
                    await self._calls.forward_to_lease(
                        route.namespace, route.name, forwarded, answer
                    )
                else:
                    await self._calls.forward(route.namespace, route.name, forwarded, answer)
        except GatewayError as error:
            if answer.started:
                # Broken off mid-answer, which only the connection's end can tell the caller.
                log.warning("%s %s broke off: %s", request.method, request.target, error.message)
                return None
            if error.status in (400, 401, 403):
                return self._refused(error, verb=PROXY)
            return _answer(error)
        return None

    async def _relayed(
        self,
        request: Request,
        namespace: str,
        pool: str,
        body: bytes | AsyncIterable[bytes],
        *,
        lease: str | None = None,
    ) -> bool:
        """Pass an admitted request on to the replica that works on its pool (or lease), when
        that is another one and the request did not come from a replica already; whether it
        was."""
        if self._peers is None or forwarding.RELAYED_HEADER.lower().encode() in request.headers:
            return False
        gateway = self._peers.elsewhere(namespace, pool, lease=lease)
        if gateway is None:
            return False
        assert request.answer is not None
        headers = forwarding.relayed(request.all_headers or request.headers.items())
        target = request.target or request.path
        deadline = time.monotonic() + self._settings.relay_seconds
        while True:
            if gateway:
                try:
                    await self._peers.relay(
                        gateway, request.method, target, headers, body, request.answer
                    )
                    return True
                except GatewayError as error:
                    # Not served there (it stops, or the pool left it): tried again where the
                    # pool is now, a body that can be sent again only.
                    again = error.reason == GatewayReason.UNAVAILABLE and isinstance(body, bytes)
                    if not again or request.answer.started or time.monotonic() > deadline:
                        raise
            elif time.monotonic() > deadline:
                raise unavailable(
                    "the replica that works on this pool has not said where its gateway is",
                    retry_after=self._settings.retry_after_seconds,
                )
            await asyncio.sleep(RELAY_AGAIN_SECONDS)
            gateway = self._peers.elsewhere(namespace, pool, lease=lease)
            if gateway is None:
                return False  # the pool is this replica's now

    def _other(self, request: Request) -> Response:
        if request.method == "GET" and request.path == "/healthz":
            return Response(200, b"ok", content_type="text/plain")
        if request.method == "GET" and request.path == "/readyz":
            if self._ready():
                return Response(200, b"ok", content_type="text/plain")
            return Response(
                503,
                b"not serving calls: a standby, or not among the replicas (yet, or any more)",
                content_type="text/plain",
            )
        return self._not_found(request.path)

    def _not_found(self, path: str) -> Response:
        return _answer(
            GatewayError(
                404,
                GatewayReason.NOT_FOUND,
                f"no such path {path!r}: the gateway serves POST "
                f"{PATH_PREFIX}/NAMESPACE/agentpools/POOL/call (or /cast), and any request to "
                f"{PATH_PREFIX}/NAMESPACE/agentpools/POOL/proxy/PATH for an HTTP pool",
            )
        )

    def _refused(self, error: GatewayError, *, verb: str) -> Response:
        """A request refused before any pool was looked at, counted without the pool, which is
        the caller's word."""
        metrics.GATEWAY_REFUSALS.labels(verb, error.reason).inc()
        return _answer(error)

    def _reply(self, answer: CallAnswer, *, verb: GatewayVerb) -> Response:
        if verb == "cast":
            return Response(202, _STRICT.encode({"agent": answer.agent}).encode())
        try:
            body = _STRICT.encode({"output": answer.output, "agent": answer.agent}).encode()
        except ValueError as error:
            return _answer(
                from_agent(
                    protocol.BAD_RESPONSE,
                    f"the output of agent {answer.agent} cannot be sent as JSON: {error}",
                )
            )
        return Response(200, body)


def _trace_headers(request: Request) -> dict[str, str]:
    """The caller's W3C trace context headers, if it sent them."""
    return {
        name.decode(): value.decode("latin-1")
        for name in (b"traceparent", b"tracestate")
        if (value := request.headers.get(name))
    }
