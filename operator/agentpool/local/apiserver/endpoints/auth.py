"""Who may talk to the local API server: TLS with a serving certificate, and a bearer token.

A real API server here runs with ``--anonymous-auth=false``: every request, ``/healthz`` and
``/version`` included, needs a valid credential, and one without gets 401 with an
``Unauthorized`` Status. The local API server does the same, so a client that forgets its token
fails locally as it would on a cluster. The token is read from ``Authorization`` exactly as the
real bearer-token authenticator reads it (header trimmed, scheme case-insensitive, the token the
second space-separated word). ``server.ApiServer`` installs :func:`token_middleware` first and
serves with :func:`server_context`.
"""

from __future__ import annotations

import hmac
import json
import ssl
from pathlib import Path
from typing import Any

from aiohttp import web

from agentpool.local.apiserver.errors import ApiError

UNAUTHORIZED = ApiError(401, "Unauthorized", "Unauthorized")


def bearer_token(header: str | None) -> str | None:
    """The token an ``Authorization`` header carries, as kube-apiserver's authenticator parses
    it; None when there is none."""
    parts = (header or "").strip().split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
        return None
    return parts[1]


def token_middleware(token: str) -> Any:
    """An aiohttp middleware that answers 401 to any request without ``token``."""
    expected = token.encode()

    @web.middleware
    async def authenticate(request: web.Request, handler: Any) -> web.StreamResponse:
        given = bearer_token(request.headers.get("Authorization"))
        if given is None or not hmac.compare_digest(given.encode(), expected):
            body = json.dumps(UNAUTHORIZED.status(), separators=(",", ":")).encode()
            return web.Response(body=body, status=401, content_type="application/json")
        response: web.StreamResponse = await handler(request)
        return response

    return authenticate


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A TLS server context for the serving certificate and key (PEM files)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context
