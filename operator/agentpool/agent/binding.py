"""The lease an agent is bound to: its own token, expiry and context, and who may call with it.

An AgentLease hands its client one agent. The operator binds the agent to the lease with
``POST /bind`` (its lease name, a token of its own, an expiry and a context) and takes it back
with ``POST /unbind``. ``agentpool.agent.server`` parses those bodies here and keeps the current
binding in a :class:`Binder`, which answers the one question the server asks of every request
carrying a token that is not the pool's: does this token open this agent now?

The binder decides and remembers; it reads no clock (the server passes ``now``), logs nothing and
never shows a token, so each rule has a table test.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentpool.wire.tokens import same_token

# RFC 3339's date-time (section 5.6): a full date, "T", a full time and an offset that is not
# optional. ``datetime.fromisoformat`` alone would also take a bare date or no offset at all.
_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}"  # full-date
    r"[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?"  # "T" partial-time
    r"([Zz]|[+-][0-9]{2}:[0-9]{2})"  # time-offset
)
# What an ``Authorization`` header carries as one token: visible ASCII, no spaces (RFC 9110's
# token68 and RFC 6750's b64token are narrower still); another token could never be presented.
_TOKEN = re.compile(r"[\x21-\x7e]+")


@dataclass(frozen=True, slots=True)
class Binding:
    """The lease an agent serves, as its handler and its ``bind``/``unbind`` hooks see it."""

    lease: str
    """The AgentLease's name."""
    context: Any
    """The lease's ``spec.context``: any JSON value, or None when the lease gave none."""
    expire_time: str
    """When the lease ends unless renewed (RFC 3339), as the operator last said."""


@dataclass(frozen=True, slots=True)
class BindRequest:
    """One ``POST /bind`` body, parsed: the binding, its token and its expiry as a time."""

    binding: Binding
    token: bytes = dataclasses.field(repr=False)
    expires: datetime


@dataclass(frozen=True, slots=True)
class UnbindRequest:
    """One ``POST /unbind`` body, parsed: the lease to take back."""

    lease: str


def parse_bind(raw: bytes) -> BindRequest | str:
    """The ``/bind`` body in ``raw``, or a sentence saying why it is not one."""
    body = _load_object(raw)
    if isinstance(body, str):
        return body
    lease, token, expire_time = body.get("lease"), body.get("token"), body.get("expireTime")
    if not isinstance(lease, str) or not lease:
        return "'lease' must be a non-empty string naming the lease"
    if not isinstance(token, str) or _TOKEN.fullmatch(token) is None:
        return "'token' must be a non-empty string of visible ASCII, as a bearer token is"
    if not isinstance(expire_time, str):
        return "'expireTime' must be an RFC 3339 time, such as 2030-01-02T03:04:05Z"
    expires = parse_time(expire_time)
    if expires is None:
        return f"'expireTime' {json.dumps(expire_time)} is not an RFC 3339 time with an offset"
    binding = Binding(lease=lease, context=body.get("context"), expire_time=expire_time)
    return BindRequest(binding=binding, token=token.encode("ascii"), expires=expires)


def parse_unbind(raw: bytes) -> UnbindRequest | str:
    """The ``/unbind`` body in ``raw``, or a sentence saying why it is not one."""
    body = _load_object(raw)
    if isinstance(body, str):
        return body
    lease = body.get("lease")
    if not isinstance(lease, str) or not lease:
        return "'lease' must be a non-empty string naming the lease"
    return UnbindRequest(lease=lease)


def parse_time(text: str) -> datetime | None:
    """``text`` as an aware time if it is an RFC 3339 date-time, else None."""
    if _RFC3339.fullmatch(text) is None:
        return None
    try:
        # A fraction finer than Python's microseconds (RFC 3339 allows any) is cut, not refused.
        return datetime.fromisoformat(text.upper())
    except ValueError:  # a month 13, a 25th hour, a leap second, the year 0
        return None


class Binder:
    """The binding of one agent, if any: bind, renew and unbind it, and check a lease token."""

    def __init__(self) -> None:
        self._binding: Binding | None = None
        self._token = b""
        self._expires: datetime | None = None

    @property
    def binding(self) -> Binding | None:
        """The current binding, from bind until unbind (an expired one too: only the operator
        ends a binding, so its ``unbind`` hook and the reset always run before the next)."""
        return self._binding

    def holds(self, lease: str) -> bool:
        """Whether the agent is bound to ``lease``."""
        return self._binding is not None and self._binding.lease == lease

    def bind(self, request: BindRequest) -> None:
        """Bind to the lease ``request`` names; the agent must not be bound already."""
        if self._binding is not None:
            raise RuntimeError(f"already bound to lease {self._binding.lease!r}")
        self._binding = request.binding
        self._token = request.token
        self._expires = request.expires

    def renew(self, request: BindRequest) -> Binding:
        """Move the expiry of the current lease to the request's; its token and context stay."""
        if self._binding is None or self._binding.lease != request.binding.lease:
            raise RuntimeError(f"not bound to lease {request.binding.lease!r}")
        self._binding = dataclasses.replace(self._binding, expire_time=request.binding.expire_time)
        self._expires = request.expires
        return self._binding

    def unbind(self) -> Binding | None:
        """Forget the binding, its token and context; the binding that was, if any."""
        binding = self._binding
        self._binding, self._token, self._expires = None, b"", None
        return binding

    def accepts(self, token: bytes, now: datetime) -> bool:
        """Whether ``token`` is the bound lease's and ``now`` is before its expiry."""
        if self._binding is None or self._expires is None or now >= self._expires:
            return False
        return same_token(token, self._token)


def _load_object(raw: bytes) -> dict[str, object] | str:
    try:
        body = json.loads(raw, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        return f"the body is not JSON: {exc}"
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    return body


def _no_constant(name: str) -> Any:
    # NaN and Infinity are Python's extensions, not JSON: a context holding one could not be
    # handed on as JSON.
    raise ValueError(f"{name} is not a JSON value")
