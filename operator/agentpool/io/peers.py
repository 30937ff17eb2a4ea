"""The gateway's side of the other replicas: a request passed on to the replica that works on its
pool, over HTTPS, with the answer streamed back as it comes.

Replicas that share the pools serve one certificate (the gateway's Secret), so a replica trusts
its CA alone and checks the name the certificate was made for (the gateway's published host)
while it connects to the other replica's own address. The request goes with this replica's
own Kubernetes credentials, which the replica it reaches checks as it checks any caller's
(TokenReview, then SubjectAccessReview on the pool). :mod:`agentpool.handlers.replicas` says
where each replica's gateway is.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterable, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass

import aiohttp
from yarl import URL

#: What a relay that got no answer raises, besides TimeoutError.
NO_ANSWER = (aiohttp.ClientError, OSError)
#: Of those, what a relay raises when its request never reached the other replica: it can be
#: sent again.
NOT_SENT = (aiohttp.ClientConnectorError,)
#: How long a connection to another replica may take: they are in one cluster.
CONNECT_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class Relayed:
    """Another replica's answer: status, headers, and its body as it comes."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: AsyncIterator[bytes]


class PeerClient:
    """HTTPS to the other replicas' gateways, trusting the gateway's CA."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._ca: bytes = b""
        self._context: ssl.SSLContext | None = None

    def _client(self, ca_pem: bytes) -> tuple[aiohttp.ClientSession, ssl.SSLContext]:
        if self._context is None or ca_pem != self._ca:
            self._context = ssl.create_default_context(cadata=ca_pem.decode())
            self._ca = ca_pem
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                # As many calls at once as callers make: each waits on its own pool's line.
                connector=aiohttp.TCPConnector(limit=0),
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
                auto_decompress=False,
            )
        return self._session, self._context

    @contextlib.asynccontextmanager
    async def relay(
        self,
        gateway: str,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: bytes | AsyncIterable[bytes] | None,
        *,
        ca_pem: bytes,
        server_name: str,
        authorization: Mapping[str, str],
    ) -> AsyncIterator[Relayed]:
        """Send the request to the gateway at ``gateway`` (its scheme, host and port), the
        certificate checked for ``server_name``; the answer streams while the context is open.
        Its head may take as long as the call it answers: the caller going away ends it."""
        session, context = self._client(ca_pem)
        sent = [*headers, *authorization.items()]
        response = await session.request(
            method,
            URL(gateway.rstrip("/") + target, encoded=True),
            headers=sent,
            data=body,
            ssl=context,
            server_hostname=server_name,
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_SECONDS),
        )
        try:
            yield Relayed(
                status=response.status,
                headers=list(response.raw_headers),
                body=response.content.iter_any(),
            )
        finally:
            response.release()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
