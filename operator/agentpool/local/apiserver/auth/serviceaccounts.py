"""Service-account tokens: the claims kube-apiserver writes into them and how it reads them back.

A token says who it is for (``sub``), for whom it is meant (``aud``), when it is good
(``iat``, ``nbf``, ``exp``) and, in the private ``kubernetes.io`` claim, the namespace, the
service account's name and uid, and the object it is bound to (a pod, with its node, or a
secret). :func:`claims` writes them as ``pkg/serviceaccount/claims.go`` does; :func:`parse`,
:func:`check_times`, :func:`audiences_for` and :func:`user_of` are the reading side, with the same
one-minute leeway on times and the same messages. Whether the account and the bound object still
exist is for the caller to look up (``auth.identities``); everything here is pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentpool.local.apiserver.auth import users
from agentpool.local.apiserver.auth.jwt import TokenError

ISSUER = "https://kubernetes.default.svc.cluster.local"
#: What the API server itself answers to, when neither the token nor the caller names audiences.
API_AUDIENCES = (ISSUER,)
#: Seconds by which a time claim may be off, as go-jose allows by default.
LEEWAY = 60
MIN_SECONDS = 600
MAX_SECONDS = 1 << 32
DEFAULT_SECONDS = 3600
#: A kubelet asking for exactly this long gets a year instead, with a ``warnafter`` at the hour.
WARN_ONLY_SECONDS = 3607
EXTENDED_SECONDS = 365 * 24 * 3600


@dataclass(frozen=True)
class Ref:
    """An object a token names: its name and uid (the uid may be unknown, as a missing node's)."""

    name: str
    uid: str = ""

    def wire(self) -> dict[str, str]:
        body = {"name": self.name}
        if self.uid:
            body["uid"] = self.uid
        return body


@dataclass(frozen=True)
class Binding:
    """What a token is bound to beyond its service account."""

    pod: Ref | None = None
    node: Ref | None = None
    secret: Ref | None = None


@dataclass(frozen=True)
class TokenClaims:
    """The claims of a verified token that the server checks."""

    issuer: str
    audiences: tuple[str, ...]
    expiry: float | None
    not_before: float | None
    issued_at: float | None
    jti: str
    namespace: str
    account: Ref
    binding: Binding


def claims(
    namespace: str,
    account: Ref,
    *,
    audiences: Sequence[str],
    now: int,
    seconds: int,
    jti: str,
    binding: Binding = Binding(),
    warn_after: int = 0,
) -> dict[str, Any]:
    """The claims of a new token for the account, good for ``seconds`` from ``now``."""
    private: dict[str, Any] = {"namespace": namespace, "serviceaccount": account.wire()}
    if binding.pod is not None:
        private["pod"] = binding.pod.wire()
        if binding.node is not None:
            private["node"] = binding.node.wire()
    elif binding.secret is not None:
        private["secret"] = binding.secret.wire()
    if warn_after:
        private["warnafter"] = now + warn_after
    return {
        "aud": list(audiences),
        "exp": now + seconds,
        "iat": now,
        "iss": ISSUER,
        "jti": jti,
        "kubernetes.io": private,
        "nbf": now,
        "sub": users.service_account_username(namespace, account.name),
    }


def issuer_of(unverified: Mapping[str, Any] | None) -> bool:
    """Whether an unverified payload claims this server as its issuer (else it is not ours)."""
    return unverified is not None and unverified.get("iss") == ISSUER


def parse(raw: Mapping[str, Any]) -> TokenClaims:
    """The claims of a verified token, typed as go-jose unmarshals them."""
    private = raw.get("kubernetes.io") or {}
    if not isinstance(private, dict):
        raise TokenError(_unmarshal("kubernetes.io", private))
    return TokenClaims(
        issuer=_text(raw, "iss"),
        audiences=_audiences(raw.get("aud")),
        expiry=_date(raw, "exp"),
        not_before=_date(raw, "nbf"),
        issued_at=_date(raw, "iat"),
        jti=_text(raw, "jti"),
        namespace=_text(private, "namespace"),
        account=_ref(private, "serviceaccount") or Ref(""),
        binding=Binding(
            pod=_ref(private, "pod"), node=_ref(private, "node"), secret=_ref(private, "secret")
        ),
    )


def check_times(token: TokenClaims, now: float) -> None:
    """Refuse a token that has expired, is not yet valid or was issued in the future."""
    if token.not_before is not None and now + LEEWAY < token.not_before:
        raise TokenError("service account token is not valid yet")
    if token.expiry is not None and now - LEEWAY > token.expiry:
        raise TokenError("service account token has expired")
    if token.issued_at is not None and now + LEEWAY < token.issued_at:
        raise TokenError("service account token is issued in the future")


def audiences_for(token: TokenClaims, requested: Sequence[str] | None) -> tuple[str, ...]:
    """The audiences both the token and the caller name (the API server's when either names
    none); a token meant for none of the caller's is refused."""
    mine = token.audiences or API_AUDIENCES
    wanted = tuple(requested) if requested else API_AUDIENCES
    shared = tuple(a for a in wanted if a in mine)
    if not shared:
        raise TokenError(
            f"token audiences {_go_quoted(mine)} is invalid for the target audiences "
            f"{_go_quoted(wanted)}"
        )
    return shared


def user_of(token: TokenClaims) -> users.UserInfo:
    """The user a valid token authenticates, with the extra a real server attaches."""
    extra: dict[str, tuple[str, ...]] = {}
    pod, node = token.binding.pod, token.binding.node
    if pod is not None and pod.name and pod.uid:
        extra[users.POD_NAME], extra[users.POD_UID] = (pod.name,), (pod.uid,)
    if token.jti:
        extra[users.CREDENTIAL_ID] = (f"JTI={token.jti}",)
    if pod is not None and node is not None and node.name:
        extra[users.NODE_NAME] = (node.name,)
        if node.uid:
            extra[users.NODE_UID] = (node.uid,)
    return users.UserInfo(
        name=users.service_account_username(token.namespace, token.account.name),
        uid=token.account.uid,
        groups=users.service_account_groups(token.namespace),
        extra=extra,
    )


def _go_quoted(values: Sequence[str]) -> str:
    """A list of strings as Go's ``%q`` prints a ``[]string``: ``["a" "b"]``."""
    return "[" + " ".join(json.dumps(v) for v in values) + "]"


def _unmarshal(name: str, value: object) -> str:
    kind = {bool: "bool", int: "number", float: "number", str: "string", list: "array"}
    return f"json: cannot unmarshal {kind.get(type(value), 'object')} into the claim {name}"


def _text(claims: Mapping[str, Any], name: str) -> str:
    value = claims.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TokenError(_unmarshal(name, value))
    return value


def _date(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TokenError("go-jose/go-jose/jwt: expected number value to unmarshal NumericDate")
    return float(value)


def _audiences(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise TokenError("go-jose/go-jose/jwt: expected string or array value to unmarshal to Audience")


def _ref(private: Mapping[str, Any], name: str) -> Ref | None:
    value = private.get(name)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TokenError(_unmarshal(name, value))
    return Ref(_text(value, "name"), _text(value, "uid"))
