"""The client's side of the gateway: one call or cast of a pool over HTTPS, no Kubernetes object.

:meth:`agentpool.client.Client.call` and :meth:`~agentpool.client.Client.cast` come here. The
gateway is found as a program in a pod finds the API server: its URL and the CA that signs its
certificate are in the ConfigMap ``agentpool-gateway`` the operator keeps in every namespace with
a pool (read once per client, and again when the gateway refuses a connection or shows a
certificate that CA does not sign: it moved, or its certificate was renewed under a new CA),
unless the program gives ``gateway_url`` (and ``gateway_ca``).
The caller's identity is its kubeconfig's bearer token (or a ServiceAccount's, in a pod), the
same credentials the client shows the API server, or one given as ``gateway_token``; the token
goes into the ``Authorization`` header only. Requests go over the lean HTTP/1.1 client of
:mod:`agentpool.wire.connections`, over TLS, on kept-alive connections, so a steady caller pays no
handshake per call. When the program traces its own work with OpenTelemetry, the span current at
the call goes along in the W3C ``traceparent`` header, and the operator's and the agent's spans
for the call join the program's trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote, urlsplit

from opentelemetry import propagate, trace

from agentpool.api.gateway import (
    CA_KEY,
    CONFIGMAP,
    PATH_PREFIX,
    URL_KEY,
    GatewayRequest,
    GatewayVerb,
)
from agentpool.api.reasons import GatewayReason
from agentpool.client.cluster import Cluster
from agentpool.client.errors import (
    AgentpoolError,
    CallFailed,
    NotFound,
    PoolExhausted,
)
from agentpool.wire import events, protocol
from agentpool.wire.connections import Answer, WireError, WirePool

#: No ConfigMap names the gateway in the client's namespace, and no URL was given.
NO_GATEWAY: Final = "NoGateway"
#: The gateway could not be reached, or the connection broke before its answer.
GATEWAY_UNREACHABLE: Final = "GatewayUnreachable"
#: The client has no bearer token to show the gateway (a kubeconfig with a client certificate).
NO_TOKEN: Final = "NoToken"

_COMPACT = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
_EXHAUSTED = frozenset({GatewayReason.POOL_EXHAUSTED, GatewayReason.TOO_MANY_WAITERS})
_MESSAGE_BODY_CHARS = 200
#: The most characters one event of a streamed answer may hold: a part past it is cut off
#: rather than held in memory whole.
_EVENT_LIMIT = 64 * 1024 * 1024


@dataclass(frozen=True)
class GatewayAddress:
    """Where the gateway is: its base URL, and the CA (PEM) its certificate is checked with
    (None: the system's trust store)."""

    url: str
    ca_pem: bytes | None = None

    def context(self) -> ssl.SSLContext | None:
        if urlsplit(self.url).scheme != "https":
            return None
        if self.ca_pem is None:
            return ssl.create_default_context()
        return ssl.create_default_context(cadata=self.ca_pem.decode())


class _NotSent(AgentpoolError):
    """The gateway refused the connection or its certificate was not trusted: the request
    was never sent, so it may be sent again."""


class GatewayCaller:
    """Calls and casts of one namespace's pools through the gateway; one per client."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        url: str | None = None,
        ca_pem: bytes | None = None,
        token: str | None = None,
    ) -> None:
        self._cluster = cluster
        self._given = None if url is None else GatewayAddress(url.rstrip("/"), ca_pem)
        self._token = token
        # The kubeconfig's credentials as last presented: asked again only when refused.
        self._presented: str | None = None
        self._address: GatewayAddress | None = None
        self._wire: WirePool | None = None
        self._finding = asyncio.Lock()

    async def close(self) -> None:
        if self._wire is not None:
            await self._wire.aclose()

    async def address(self) -> GatewayAddress:
        """The gateway's address: as given, else from the namespace's ConfigMap (read once)."""
        async with self._finding:
            if self._address is None:
                self._address = self._given or await self._published()
                self._wire = WirePool(tls=self._address.context())
        return self._address

    async def _published_again(self, stale: GatewayAddress) -> GatewayAddress | None:
        """The address the ConfigMap gives now, if it differs from ``stale``; None when the
        address was given, or is published unchanged."""
        if self._given is not None:
            return None
        async with self._finding:
            if self._address == stale:
                found = await self._published()
                if found == stale:
                    return None
                self._address = found
                assert self._wire is not None
                self._wire.trust(found.context())
        return self._address

    async def _published(self) -> GatewayAddress:
        namespace = self._cluster.namespace
        try:
            data = await self._cluster.configmap_data(CONFIGMAP)
        except NotFound:
            raise AgentpoolError(
                NO_GATEWAY,
                f'no ConfigMap "{CONFIGMAP}" in namespace "{namespace}": the operator publishes '
                "it once a pool exists there; or give the client gateway_url",
            ) from None
        if URL_KEY not in data:
            raise AgentpoolError(NO_GATEWAY, f'ConfigMap "{CONFIGMAP}" has no "{URL_KEY}"')
        ca = data.get(CA_KEY)
        return GatewayAddress(data[URL_KEY].rstrip("/"), ca.encode() if ca else None)

    async def send(
        self, pool: str, request: GatewayRequest, *, verb: GatewayVerb, timeout: float
    ) -> Any:
        """A call's output, or the agent that took a cast; raises the error the gateway
        answered (:class:`PoolExhausted`, :class:`NotFound`, :class:`CallFailed`, or
        :class:`AgentpoolError` with its reason)."""
        address = await self.address()
        body = self._body(request)
        path = self._path(pool, verb)
        authorization = await self._authorization()
        try:
            answer = await self._post(address, path, authorization, body, timeout)
        except _NotSent:
            # Its certificate was renewed under a new CA, or it moved: the ConfigMap says so.
            moved = await self._published_again(address)
            if moved is None:
                raise
            address = moved
            answer = await self._post(address, path, authorization, body, timeout)
        if answer.status == 401 and self._token is None:
            # A token file rotated, or an exec plugin's token expired: ask once for a fresh one.
            renewed = await self._cluster.bearer(refused=authorization)
            if renewed is not None and renewed != authorization:
                self._presented = renewed
                answer = await self._post(address, path, renewed, body, timeout)
        return _outcome(answer, verb=verb, url=address.url)

    async def stream(
        self, pool: str, request: GatewayRequest, *, timeout: float
    ) -> AsyncIterator[Any]:
        """A call's output in its parts as the agent makes them, asked as server-sent events;
        an agent that answers whole gives its output as the one part. ``timeout`` bounds the
        wait for the answer and for each next part. Raises as :meth:`send` does, and
        :class:`CallFailed` for a failure that comes mid-stream."""
        address = await self.address()
        body = self._body(request)
        path = self._path(pool, "call")
        authorization = await self._authorization()
        renewed = moved = False
        while True:
            head = self._head(address, path, authorization, accept=protocol.EVENT_STREAM)
            host, port = _host_port(address)
            assert self._wire is not None
            async with contextlib.AsyncExitStack() as stack:
                try:
                    async with asyncio.timeout(timeout):
                        answer = await stack.enter_async_context(
                            self._wire.stream(host, port, head, body)
                        )
                        is_stream = answer.content_type.split(b";")[0].strip().lower() == (
                            protocol.EVENT_STREAM.encode()
                        )
                        if answer.status != 200 or not is_stream:
                            whole = b"".join([piece async for piece in answer.pieces])
                except TimeoutError:
                    raise AgentpoolError(
                        GATEWAY_UNREACHABLE,
                        f"the gateway at {address.url} gave no answer in {timeout:g}s",
                    ) from None
                except (ssl.SSLCertVerificationError, ConnectionRefusedError) as error:
                    # Its certificate was renewed under a new CA, or it moved: ask once more.
                    found = None if moved else await self._published_again(address)
                    if found is None:
                        raise _lost(address, error) from None
                    address, moved = found, True
                    continue
                except (OSError, asyncio.IncompleteReadError, WireError, ValueError) as error:
                    raise _lost(address, error) from None
                if answer.status == 401 and self._token is None and not renewed:
                    # A token file rotated, or an exec plugin's expired: ask once for a fresh one.
                    fresh = await self._cluster.bearer(refused=authorization)
                    if fresh is not None and fresh != authorization:
                        self._presented = authorization = fresh
                        renewed = True
                        continue
                if answer.status != 200 or not is_stream:
                    yield _outcome(
                        Answer(answer.status, whole, answer.retry_after),
                        verb="call",
                        url=address.url,
                    )
                    return
                async for said in _events(answer.pieces, timeout=timeout, address=address):
                    yield said
                return

    def _body(self, request: GatewayRequest) -> bytes:
        try:
            return _COMPACT.encode(request.to_wire() | {"item": request.item}).encode()
        except (TypeError, ValueError) as error:
            raise AgentpoolError(GatewayReason.INVALID, f"the item is not JSON: {error}") from None

    def _path(self, pool: str, verb: GatewayVerb) -> str:
        return f"{PATH_PREFIX}/{quote(self._cluster.namespace)}/agentpools/{quote(pool)}/{verb}"

    @staticmethod
    def _head(
        address: GatewayAddress, path: str, authorization: str, *, accept: str | None = None
    ) -> bytes:
        parts = urlsplit(address.url)
        lines = (
            f"POST {parts.path.rstrip('/')}{path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            f"Authorization: {authorization}\r\nContent-Type: application/json\r\n"
        )
        if accept is not None:
            lines += f"{protocol.ACCEPT_HEADER}: {accept}\r\n"
        return (lines + _trace_head()).encode("latin-1")

    async def _authorization(self) -> str:
        if self._token is not None:
            return f"Bearer {self._token}"
        if self._presented is not None:
            return self._presented
        header = self._presented = await self._cluster.bearer()
        if header is None:
            raise AgentpoolError(
                NO_TOKEN,
                "the kubeconfig's user presents no bearer token (a client certificate?), and the "
                "gateway takes one: give the client gateway_token, for example from `kubectl "
                "create token SERVICEACCOUNT`",
            )
        return header

    async def _post(
        self, address: GatewayAddress, path: str, authorization: str, body: bytes, timeout: float
    ) -> Answer:
        host, port = _host_port(address)
        head = self._head(address, path, authorization)
        assert self._wire is not None
        try:
            async with asyncio.timeout(timeout):
                return await self._wire.request(host, port, head, body)
        except TimeoutError:
            raise AgentpoolError(
                GATEWAY_UNREACHABLE, f"the gateway at {address.url} gave no answer in {timeout:g}s"
            ) from None
        except (ssl.SSLCertVerificationError, ConnectionRefusedError) as error:
            raise _NotSent(
                GATEWAY_UNREACHABLE, f"could not reach the gateway at {address.url}: {error}"
            ) from None
        except (OSError, asyncio.IncompleteReadError, WireError, ValueError) as error:
            raise _lost(address, error) from None


def _host_port(address: GatewayAddress) -> tuple[str, int]:
    parts = urlsplit(address.url)
    return parts.hostname or "localhost", parts.port or (443 if parts.scheme == "https" else 80)


def _lost(address: GatewayAddress, error: BaseException) -> AgentpoolError:
    cause = str(error) or type(error).__name__
    return AgentpoolError(GATEWAY_UNREACHABLE, f"lost the gateway at {address.url}: {cause}")


async def _events(
    pieces: AsyncIterator[bytes], *, timeout: float, address: GatewayAddress
) -> AsyncIterator[Any]:
    """The parts of a streamed answer as they come; :class:`CallFailed` for its ``error``
    event, a malformed one, or a stream that ends before its ``done``."""
    parser = events.EventParser(limit=_EVENT_LIMIT)
    parts = 0
    while True:
        try:
            async with asyncio.timeout(timeout):
                piece = await anext(pieces, None)
        except TimeoutError:
            raise CallFailed(
                protocol.CALL_TIMEOUT, f"no part came from the gateway in {timeout:g}s"
            ) from None
        except (OSError, asyncio.IncompleteReadError, WireError, ValueError) as error:
            piece = None
            if not isinstance(error, asyncio.IncompleteReadError):
                raise _lost(address, error) from None
        if piece is None:
            raise CallFailed(
                protocol.AGENT_LOST,
                f"the streamed answer ended after {parts} part(s) with no 'done' or 'error'",
            )
        try:
            found = parser.feed(piece)
        except events.EventTooLarge as error:
            raise CallFailed(protocol.BAD_RESPONSE, str(error)) from None
        for event in found:
            said = events.read_event(event)
            if isinstance(said, events.Part):
                parts += 1
                yield said.value
            elif isinstance(said, events.Done):
                return
            elif isinstance(said, events.Failed):
                raise CallFailed(said.reason, said.message)


def _trace_head() -> str:
    """The program's current trace context as header lines, through its propagator; nothing
    when no span of its is current."""
    if not trace.get_current_span().get_span_context().is_valid:
        return ""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return "".join(
        f"{name}: {value}\r\n"
        for name, value in carrier.items()
        if value.isascii() and value.isprintable()
    )


def _outcome(answer: Answer, *, verb: GatewayVerb, url: str) -> Any:
    """A call's output or a cast's agent from the gateway's answer, or the error it means."""
    try:
        data = json.loads(answer.body)
    except ValueError:
        data = None
    if isinstance(data, dict):
        if answer.status == 200 and verb == "call" and "output" in data:
            return data["output"]
        if answer.status == 202 and verb == "cast" and "agent" in data:
            return str(data["agent"])
        error = data.get("error")
        if isinstance(error, dict) and isinstance(error.get("reason"), str):
            raise _error(answer, error["reason"], str(error.get("message", "")))
    text = answer.body[:_MESSAGE_BODY_CHARS].decode("utf-8", "replace")
    raise AgentpoolError(
        GATEWAY_UNREACHABLE, f"the gateway at {url} answered HTTP {answer.status}: {text!r}"
    )


def _error(answer: Answer, reason: str, message: str) -> AgentpoolError:
    if reason in _EXHAUSTED:
        exhausted = PoolExhausted(reason, message)
        exhausted.retry_after = _seconds(answer.retry_after)
        return exhausted
    if answer.status == 404:
        return NotFound(reason, message)
    if answer.status in (502, 504):
        return CallFailed(reason, message)
    return AgentpoolError(reason, message)


def _seconds(value: bytes | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
