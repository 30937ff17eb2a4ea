"""Who may talk to the local API server, and what they may do: TLS, authentication, impersonation
and authorization, in the order kube-apiserver's filters apply them.

A real API server here runs with ``--anonymous-auth=false``: every request, ``/healthz`` and
``/version`` included, needs a valid credential, and one without gets 401 with an
``Unauthorized`` Status. The token is read from ``Authorization`` exactly as the real
bearer-token authenticator reads it (header trimmed, scheme case-insensitive, the token the
second space-separated word) and is either the cluster's admin token or a service-account token
the server issued (``auth.identities``). ``Impersonate-*`` headers then switch the user, when the
requester may (``auth.impersonation``); then the request's attributes (``auth.attributes``) are
authorized (``auth.policy``), and a refusal is the real 403 Status. The user is left on the
request for the reviews that ask about the requester. A server made without an admin token (the
unit tests' and benchmarks' plain HTTP) treats every request as the admin's.
``server.ApiServer`` installs :func:`access_middleware` first and serves with
:func:`server_context`.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Middleware

from agentpool.local.apiserver.auth import impersonation
from agentpool.local.apiserver.auth.attributes import forbidden, request_attributes
from agentpool.local.apiserver.auth.identities import ADMIN, Identities, bearer_token
from agentpool.local.apiserver.auth.policy import Authorizer
from agentpool.local.apiserver.auth.users import UserInfo
from agentpool.local.apiserver.errors import ApiError

UNAUTHORIZED = ApiError(401, "Unauthorized", "Unauthorized")
USER = web.RequestKey("user", UserInfo)
"""Where the middleware leaves the request's (possibly impersonated) user."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def requester(request: web.Request) -> UserInfo:
    """The user a request runs as, once the middleware let it through."""
    user = request.get(USER)
    return user if isinstance(user, UserInfo) else ADMIN


def _status(error: ApiError) -> web.Response:
    body = json.dumps(error.status(), separators=(",", ":")).encode()
    return web.Response(body=body, status=error.code, content_type="application/json")


def access_middleware(identities: Identities, authorizer: Authorizer) -> Middleware:
    """An aiohttp middleware: 401 for a request no one is authenticated by, 403 for one its
    user may not make; otherwise the handler runs with the user on the request."""

    @web.middleware
    async def admit(request: web.Request, handler: Handler) -> web.StreamResponse:
        user = ADMIN
        if identities.admin_token is not None:
            token = bearer_token(request.headers.get("Authorization"))
            found = identities.authenticate(token).user if token is not None else None
            if found is None:
                return _status(UNAUTHORIZED)
            user = found
        query = {key: request.query.getall(key) for key in request.query}
        attributes = request_attributes(user, request.method, request.path, query)
        try:
            wanted = impersonation.wanted(request.headers.items())
            if wanted is not None:
                user = impersonation.impersonate(wanted, attributes, authorizer.decide)
                attributes = attributes.by(user)
            decision = authorizer.decide(attributes)
            if not decision.allowed:
                raise forbidden(attributes, decision.reason)
        except ApiError as error:
            return _status(error)
        request[USER] = user
        return await handler(request)

    return admit


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A TLS server context for the serving certificate and key (PEM files)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context
