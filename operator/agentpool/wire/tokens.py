"""The bearer token every caller of agentpool shows: read from its header, compared safely.

An agent takes its pool's token, or a bound lease's, in ``Authorization: Bearer <token>``, and the
gateway takes a caller's Kubernetes token the same way. The agent SDK's server and its binding
(``agentpool.agent.server``, ``agentpool.agent.binding``), the local kubelet's simulated agent and
the gateway (``agentpool.gateway.access``) all read the header with :func:`bearer_token`; the
agents compare what they are shown with :func:`same_token`, so the rule is written once, below
every side that keeps it.
"""

from __future__ import annotations

import hmac


def bearer_token(authorization: str) -> bytes | None:
    """The token of an ``Authorization: Bearer <token>`` header (the scheme in any case, as
    RFC 9110 has it), or None for any other header."""
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip().encode("utf-8", "surrogateescape")


def same_token(given: bytes, expected: bytes) -> bool:
    """Whether two tokens are equal, compared in constant time so timing tells nothing."""
    return hmac.compare_digest(given, expected)
