"""A forwarded request, read at the edge: where it goes, what the gateway takes from it, and what
passes on.

``/v1/namespaces/{ns}/agentpools/{pool}/proxy/{path}`` reaches an agent of the pool as
``/{path}`` with the query as sent, as the API server's ``pods/{name}/proxy/{path}`` reaches a
pod. The request's ``Agentpool-*`` headers are the gateway's, as a call's body fields are
(priority, wait, the two timeouts), and a bad one is refused naming it. What passes on either way
is every end-to-end header: the hop-by-hop ones (RFC 9110 7.6.1, and those a ``Connection``
header names) are the connection's own, ``Host`` is the agent's, and the caller's
``Authorization`` is never handed to an agent. Pure: the server calls these.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterable, Iterable
from dataclasses import dataclass
from typing import Final

from agentpool.api.gateway import (
    CALL_TIMEOUT_HEADER,
    CHECKOUT_TIMEOUT_HEADER,
    FORWARDED_KINDS,
    MAX_TIMEOUT_SECONDS,
    PRIORITY_HEADER,
    PROXY,
    WAIT_HEADER,
)
from agentpool.gateway.errors import invalid

#: Headers that belong to one connection, never passed on (RFC 9110 7.6.1, and the older
#: ``Keep-Alive`` and ``Proxy-Connection``).
HOP_BY_HOP: Final = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
#: Headers of the caller's request that are not the agent's business: the gateway answers
#: ``Expect`` itself, and ``Host`` names the gateway.
_NOT_PASSED_ON: Final = HOP_BY_HOP | {b"authorization", b"host", b"expect"}
_OWN_PREFIX: Final = b"agentpool-"


@dataclass(frozen=True, slots=True)
class Forwarded:
    """A request to pass on to one agent of a pool, and how it waits for one."""

    method: str
    target: str
    """The path and query the agent gets, as the caller sent them: ``/v1/chat?x=1``."""
    headers: tuple[tuple[str, str], ...]
    body: bytes | AsyncIterable[bytes] | None
    """Whole when all of it came with the request's head, else streamed as it comes."""
    priority: int = 0
    wait: bool = True
    checkout_timeout_seconds: float | None = None
    call_timeout_seconds: float | None = None


def is_forward(target: bytes) -> bool:
    """Whether a request target (path and query, as sent) is a forwarded request's, so its body
    streams; decided on the raw bytes before the request is read."""
    parts = target.split(b"?", 1)[0].split(b"/", 7)
    return (
        len(parts) >= 7
        and parts[1:3] == [b"v1", b"namespaces"]
        and parts[4] in _KINDS
        and parts[6] == PROXY.encode()
    )


_KINDS: Final = frozenset(kind.encode() for kind in FORWARDED_KINDS)


@dataclass(frozen=True, slots=True)
class Route:
    """Where a forwarded request goes: a pool's agent or a lease's, and the agent's target."""

    namespace: str
    kind: str
    """``agentpools`` or ``agentleases``."""
    name: str
    target: str


def route(target: str) -> Route | None:
    """Where ``/v1/namespaces/NS/agentpools/POOL/proxy/...`` (or ``.../agentleases/LEASE/proxy/
    ...``) goes; None for any other target. ``.../proxy`` alone reaches the agent's ``/``."""
    path, mark, query = target.partition("?")
    parts = path.split("/", 7)
    if len(parts) < 7 or parts[1:3] != ["v1", "namespaces"] or parts[4] not in FORWARDED_KINDS:
        return None
    if parts[6] != PROXY or not parts[3] or not parts[5]:
        return None
    rest = "/" + (parts[7] if len(parts) > 7 else "")
    return Route(parts[3], parts[4], parts[5], rest + mark + query)


def passed_on(headers: Iterable[tuple[bytes, bytes]]) -> tuple[tuple[str, str], ...]:
    """The caller's headers the agent gets: all but the connection's, the gateway's own and the
    caller's credentials."""
    headers = list(headers)
    named = _connection_named(headers)
    return tuple(
        (name.decode("latin-1"), value.decode("latin-1"))
        for name, value in headers
        if (key := name.lower()) not in _NOT_PASSED_ON
        and key not in named
        and not key.startswith(_OWN_PREFIX)
    )


def passed_back(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    """The agent's headers the caller gets: all but the connection's, and the gateway's own
    (``Agentpool-Agent`` is the gateway's word, never an agent's)."""
    headers = list(headers)
    named = _connection_named(headers)
    return [
        (name.decode("latin-1"), value.decode("latin-1"))
        for name, value in headers
        if (key := name.lower()) not in HOP_BY_HOP
        and key not in named
        and not key.startswith(_OWN_PREFIX)
    ]


#: Marks a request one replica passed on to the replica that works on its pool, naming the
#: first: it is served where it arrives, never passed on again.
RELAYED_HEADER: Final = "Agentpool-Relayed-By"
_NOT_RELAYED: Final = HOP_BY_HOP | {b"authorization", b"host", b"expect", b"content-length"}


def relayed(headers: Iterable[tuple[bytes, bytes]]) -> tuple[tuple[str, str], ...]:
    """The caller's headers another replica gets with its request: all but the connection's,
    and the caller's credentials (the replica passes it on as itself); the gateway's own stay,
    as the replica it goes to reads them."""
    headers = list(headers)
    named = _connection_named(headers)
    return tuple(
        (name.decode("latin-1"), value.decode("latin-1"))
        for name, value in headers
        if (key := name.lower()) not in _NOT_RELAYED and key not in named
    )


def relayed_back(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    """Another replica's answer as its caller gets it: all but the connection's headers."""
    headers = list(headers)
    named = _connection_named(headers)
    return [
        (name.decode("latin-1"), value.decode("latin-1"))
        for name, value in headers
        if (key := name.lower()) not in HOP_BY_HOP and key not in named
    ]


def _connection_named(headers: list[tuple[bytes, bytes]]) -> frozenset[bytes]:
    """The headers a ``Connection`` header names, hop-by-hop too (RFC 9110 7.6.1)."""
    return frozenset(
        token.strip().lower()
        for name, value in headers
        if name.lower() == b"connection"
        for token in value.split(b",")
    )


def forwarded(
    method: str,
    target: str,
    headers: list[tuple[bytes, bytes]],
    body: bytes | AsyncIterable[bytes] | None,
) -> Forwarded:
    """The request to pass on, with the gateway's own headers read; a 400 naming a bad one."""
    own = {
        name.decode("latin-1").lower(): value.decode("latin-1").strip()
        for name, value in headers
        if name.lower().startswith(_OWN_PREFIX)
    }
    framed = {name.lower(): value.strip() for name, value in headers}
    # A request without a body must reach the agent without one: a chunked empty body on a GET
    # is read by many servers as the start of the next request.
    has_body = b"transfer-encoding" in framed or framed.get(b"content-length", b"0") != b"0"
    return Forwarded(
        method=method,
        target=target,
        headers=passed_on(headers),
        body=body if has_body else None,
        priority=_integer(own, PRIORITY_HEADER),
        wait=_flag(own, WAIT_HEADER),
        checkout_timeout_seconds=_seconds(own, CHECKOUT_TIMEOUT_HEADER),
        call_timeout_seconds=_seconds(own, CALL_TIMEOUT_HEADER),
    )


def _integer(own: dict[str, str], header: str) -> int:
    text = own.get(header.lower())
    if text is None:
        return 0
    try:
        return int(text)
    except ValueError:
        raise invalid(f"{header}: must be an integer, got {text!r}") from None


def _flag(own: dict[str, str], header: str) -> bool:
    text = own.get(header.lower())
    if text is None:
        return True
    if text.lower() not in ("true", "false"):
        raise invalid(f"{header}: must be true or false, got {text!r}")
    return text.lower() == "true"


def _seconds(own: dict[str, str], header: str) -> float | None:
    text = own.get(header.lower())
    if text is None:
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds <= MAX_TIMEOUT_SECONDS:
        raise invalid(
            f"{header}: must be a number of seconds greater than 0 and at most "
            f"{MAX_TIMEOUT_SECONDS:g}, got {text!r}"
        )
    return seconds
