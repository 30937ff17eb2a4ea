"""A recording HTTP proxy in front of the API server, so one client's requests can be told apart.

The local API server counts every request by (verb, resource), whoever sent it: the kubelet, the
test's own client, kubectl. Putting this proxy between the operator and the API server records
exactly what the operator asked for, as RBAC sees it: (apiGroup, resource, verb), with the
subresource kept (``poolruns/status``). Watches stream through unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from agentpool.local.kubeconfig import ApiAccess

# Headers that describe one hop of the connection rather than the message.
HOP_HEADERS = frozenset(
    {"host", "connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding"}
)


@dataclass(frozen=True)
class Access:
    """One request as an RBAC authorizer sees it."""

    group: str
    resource: str
    verb: str


def classify(method: str, path: str, watch: bool) -> Access | None:
    """The RBAC view of a resource request, or None for discovery and other non-resource URLs."""
    parts = [part for part in path.split("/") if part]
    if len(parts) >= 3 and parts[0] == "api":
        group, rest = "", parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        return None
    if rest[0] == "watch":
        watch, rest = True, rest[1:]
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
        rest = rest[2:]
    resource = rest[0] if len(rest) < 3 else f"{rest[0]}/{rest[2]}"
    named = len(rest) >= 2
    verbs = {"POST": "create", "PUT": "update", "PATCH": "patch"}
    if method == "GET":
        verb = "get" if named else ("watch" if watch else "list")
    elif method == "DELETE":
        verb = "delete" if named else "deletecollection"
    else:
        verb = verbs[method]
    return Access(group, resource, verb)


class RecordingProxy:
    """Forwards every request to the API server ``upstream`` reaches (trusting its CA, passing on
    the client's own credentials) and counts the resource requests it saw."""

    def __init__(self, upstream: ApiAccess) -> None:
        self.upstream = upstream.server.rstrip("/")
        self._ssl = upstream.ssl_context()
        self.accesses: Counter[Access] = Counter()
        self.user_agents: Counter[str] = Counter()
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None),
            connector=aiohttp.TCPConnector(ssl=self._ssl if self._ssl is not None else True),
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        # A watch the client hung up on must not outlive it, waiting for the upstream's next event.
        self._runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            handler_cancellation=True,
            shutdown_timeout=1,
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.base_events.Server)
        self.port = server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        # Closing the upstream side first ends the watches still streaming through.
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        watch = request.query.get("watch", "").lower() in ("true", "1")
        access = classify(request.method, request.path, watch)
        if access is not None:
            self.accesses[access] += 1
        self.user_agents[request.headers.get("User-Agent", "")] += 1
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        body = await request.read()
        async with self._session.request(
            request.method, self.upstream + request.path_qs, headers=headers, data=body or None
        ) as upstream:
            response = web.StreamResponse(
                status=upstream.status,
                headers={k: v for k, v in upstream.headers.items() if k.lower() not in HOP_HEADERS},
            )
            await response.prepare(request)
            # A watch ends when either side hangs up; neither is an error of the proxy.
            with contextlib.suppress(ConnectionError, aiohttp.ClientPayloadError):
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
            return response
