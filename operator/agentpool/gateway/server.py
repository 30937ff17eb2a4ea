"""The gateway's HTTPS server: ``POST /v1/namespaces/{ns}/agentpools/{pool}/call`` and ``/cast``.

Each request goes through the same steps: the path names the pool and the verb; the caller's
bearer token is checked (:class:`~agentpool.gateway.access.Access`); the body is read within its
limit and validated into a :class:`~agentpool.api.gateway.GatewayRequest` with its envelope
encoded (:mod:`~agentpool.gateway.requests`); then the operator's :class:`Calls` hands the item
to an agent. A call answers ``200 {"output", "agent"}``, a cast ``202 {"agent"}``; anything
else is ``{"error": {"reason", "message"}}`` with its status (:mod:`~agentpool.gateway.errors`).
``GET /healthz`` says the server runs; ``GET /readyz`` says whether this operator serves calls
now (a standby replica does not), for the Service's readiness. Neither needs a token.

A caller that disconnects has its request's task cancelled at once (aiohttp's handler
cancellation): waiting, it leaves the pool's line; mid-call, the operator takes the agent back
once its item ends. Built on aiohttp's server, which the operator already carries for its agent
client. :mod:`agentpool.handlers.operator` starts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import ssl
from collections.abc import Callable
from typing import Final

from aiohttp import web

from agentpool import metrics
from agentpool.agent import protocol
from agentpool.api.gateway import PATH_PREFIX, VERBS, GatewayVerb
from agentpool.api.reasons import GatewayReason
from agentpool.gateway.access import Access
from agentpool.gateway.contracts import Answer, Calls
from agentpool.gateway.errors import GatewayError, from_agent, too_large
from agentpool.gateway.requests import envelope, parse_request
from agentpool.settings import GatewaySettings

log = logging.getLogger(__name__)

JSON: Final = "application/json"
# Outputs come from the agent's JSON; a number JSON cannot carry (1e400) is the agent's fault.
_STRICT = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
_ROUTE: Final = PATH_PREFIX + "/{namespace}/agentpools/{pool}/{verb}"


def _answer(error: GatewayError) -> web.Response:
    response = web.Response(body=error.body(), status=error.status, content_type=JSON)
    if error.retry_after is not None:
        response.headers["Retry-After"] = str(max(1, math.ceil(error.retry_after)))
    if error.status == 405:
        response.headers["Allow"] = "POST"
    return response


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
    ) -> None:
        self._calls = calls
        self._access = access
        self._settings = settings
        self._tls = tls
        self._ready = ready
        self._runner: web.AppRunner | None = None
        self._host = "127.0.0.1"
        self._port = 0

    async def start(self, host: str, port: int) -> None:
        """Listen on ``host``:``port`` (0: a free port, see :attr:`port`)."""
        app = web.Application(client_max_size=self._settings.body_limit_bytes)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_route("*", _ROUTE, self._serve)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, handler_cancellation=True
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=self._tls, reuse_address=True)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.base_events.Server)
        self._host = host
        self._port = int(server.sockets[0].getsockname()[1])

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        """Where the gateway listens, as a client on this machine reaches it."""
        host = "127.0.0.1" if self._host in ("0.0.0.0", "", "::") else self._host
        scheme = "https" if self._tls is not None else "http"
        return f"{scheme}://{host}:{self._port}"

    async def stop(self) -> None:
        if self._runner is not None:
            server = self._runner.server
            transports = [c.transport for c in (server.connections if server else [])]
            await self._runner.cleanup()
            self._runner = None
            # A TLS connection closes only once the peer answers its close_notify, which an
            # idle kept-alive client never does: end those sockets outright.
            for transport in transports:
                if transport is not None:
                    transport.abort()

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, _: web.Request) -> web.Response:
        if self._ready():
            return web.Response(text="ok")
        return web.Response(text="not serving calls: another replica does", status=503)

    async def _unknown(self, request: web.Request) -> web.Response:
        return _answer(
            GatewayError(
                404,
                GatewayReason.NOT_FOUND,
                f"no such path {request.path!r}: the gateway serves POST "
                f"{PATH_PREFIX}/NAMESPACE/agentpools/POOL/call (or /cast)",
            )
        )

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        info = request.match_info
        verb_text = info["verb"]
        if verb_text not in VERBS:
            return await self._unknown(request)
        verb: GatewayVerb = "call" if verb_text == "call" else "cast"
        if request.method != "POST":
            return _answer(
                GatewayError(
                    405,
                    GatewayReason.METHOD_NOT_ALLOWED,
                    f"{request.method} is not served here: send POST with a JSON body",
                )
            )
        namespace, pool = info["namespace"], info["pool"]
        try:
            await self._access.admit(
                request.headers.get("Authorization"), verb=verb, namespace=namespace, pool=pool
            )
            call = parse_request(await self._body(request))
            answer = await self._calls.serve(namespace, pool, call, envelope(call), verb=verb)
        except GatewayError as error:
            if error.status in (400, 401, 403, 413):
                metrics.GATEWAY_REFUSALS.labels(verb, error.reason).inc()
            return _answer(error)
        return self._reply(answer, verb=verb)

    async def _body(self, request: web.Request) -> bytes:
        limit = self._settings.body_limit_bytes
        if request.content_length is not None and request.content_length > limit:
            raise too_large(limit)
        try:
            return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise too_large(limit) from None

    def _reply(self, answer: Answer, *, verb: GatewayVerb) -> web.Response:
        if verb == "cast":
            body = _STRICT.encode({"agent": answer.agent}).encode()
            return web.Response(body=body, status=202, content_type=JSON)
        try:
            body = _STRICT.encode({"output": answer.output, "agent": answer.agent}).encode()
        except ValueError as error:
            return _answer(
                from_agent(
                    protocol.BAD_RESPONSE,
                    f"the output of agent {answer.agent} cannot be sent as JSON: {error}",
                )
            )
        return web.Response(body=body, status=200, content_type=JSON)


async def serve_until(server: GatewayServer, stop: asyncio.Event) -> None:
    """Keep ``server`` until ``stop`` is set (or the task is cancelled), then stop it."""
    try:
        await stop.wait()
    finally:
        with contextlib.suppress(Exception):
            await server.stop()
