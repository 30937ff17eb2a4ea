"""Who a bearer token is: the cluster's admin token, or a service-account token the server signed.

The admin token (the kubeconfig's, kept under ``DIR/pki``) is the user ``admin`` in
``system:masters``, as a real cluster's static-token admin is. Any other token must be a JWT this
server signed with its service-account key (:mod:`.jwt`), meant for an audience the caller
accepts, within its times, and still backed by its ServiceAccount (same uid, not deleted) and by
the pod or secret it is bound to, as ``pkg/serviceaccount``'s validator checks them
(:mod:`.serviceaccounts` has the pure checks; the lookups are here). Every authenticated user
also gets ``system:authenticated``. The outcome carries the error a TokenReview reports, worded
as the real authenticator chain words it (``invalid bearer token``, then the token's own
failure). :func:`bearer_token` reads a token from an ``Authorization`` header; a TokenReview
reads ``spec.token`` through it too, as the real one does. The authentication middleware, the
TokenReview endpoint and TokenRequest use :class:`Identities`.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from agentpool import certificates
from agentpool.local.apiserver.auth import jwt, serviceaccounts, users
from agentpool.local.apiserver.auth.jwt import TokenError
from agentpool.local.apiserver.errors import aggregate
from agentpool.local.apiserver.registry.core import Core

ADMIN = users.UserInfo("admin", "admin-uid", (users.MASTERS, users.AUTHENTICATED))
INVALID = "invalid bearer token"
INVALIDATED = "service account token has been invalidated"
#: What Go's ``strings.TrimSpace`` trims (``unicode.IsSpace``); ``str.strip`` also trims U+001C
#: to U+001F, which the real server keeps.
GO_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680"
    + "".join(map(chr, range(0x2000, 0x200B)))
    + ("\u2028\u2029\u202f\u205f\u3000")
)


def bearer_token(header: str | None) -> str | None:
    """The token an ``Authorization`` header carries, as kube-apiserver's bearer-token
    authenticator parses it (trimmed, scheme case-insensitive, the second space-separated
    word); None when there is none."""
    parts = (header or "").strip(GO_SPACE).split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
        return None
    return parts[1]


@dataclass(frozen=True)
class Authenticated:
    """A token's outcome: the user (None when it authenticates no one), the audiences it was
    accepted for, and the error a TokenReview reports."""

    user: users.UserInfo | None
    audiences: tuple[str, ...] = ()
    error: str = ""


class Identities:
    """The server's authenticators and its service-account signing key."""

    def __init__(self, core: Core, *, admin_token: str | None, signing_key: bytes | None) -> None:
        self.core = core
        self.admin_token = admin_token
        self._pem = signing_key
        self._key: rsa.RSAPrivateKey | None = None

    @property
    def key(self) -> rsa.RSAPrivateKey:
        """The service-account signing key; one of its own when the server was given none."""
        if self._key is None:
            pem = self._pem or certificates.make_signing_key()
            loaded = serialization.load_pem_private_key(pem, password=None)
            if not isinstance(loaded, rsa.RSAPrivateKey):
                raise ValueError("the service-account signing key must be an RSA key")
            self._key = loaded
        return self._key

    def now(self) -> float:
        return self.core.clock().timestamp()

    def authenticate(self, token: str, audiences: Sequence[str] | None = None) -> Authenticated:
        """Who the token is, for the audiences asked (the API server's when none are)."""
        wanted = tuple(audiences) if audiences else serviceaccounts.API_AUDIENCES
        if self.admin_token is not None and hmac.compare_digest(
            token.encode(errors="surrogatepass"), self.admin_token.encode()
        ):
            shared = tuple(a for a in wanted if a in serviceaccounts.API_AUDIENCES)
            if not shared:
                return Authenticated(None, error=INVALID)
            return Authenticated(ADMIN, shared)
        if not serviceaccounts.issuer_of(jwt.unverified_claims(token)):
            return Authenticated(None, error=INVALID)
        try:
            raw = jwt.verify(token, [self.key.public_key()])
            if raw is None:
                return Authenticated(None, error=INVALID)
            claims = serviceaccounts.parse(raw)
            shared = serviceaccounts.audiences_for(claims, wanted)
            serviceaccounts.check_times(claims, self.now())
            self._check_objects(claims)
        except TokenError as error:
            return Authenticated(None, error=aggregate([INVALID, str(error)]))
        user = serviceaccounts.user_of(claims)
        groups = users.with_group(user.groups, users.AUTHENTICATED)
        return Authenticated(replace(user, groups=groups), shared)

    def _check_objects(self, claims: serviceaccounts.TokenClaims) -> None:
        """The account and the bound object must still be there, as the token knew them."""
        namespace, account = claims.namespace, claims.account
        if not account.name:
            raise TokenError("resource name may not be empty")
        if not namespace:
            raise TokenError("the server could not find the requested resource")
        found = self.core.store.get(("", "serviceaccounts"), namespace, account.name)
        if found is None:
            raise TokenError(f'serviceaccounts "{account.name}" not found')
        uid = found["metadata"].get("uid", "")
        if uid != account.uid:
            raise TokenError(f"service account UID ({uid}) does not match claim ({account.uid})")
        if self._deleted(found):
            raise TokenError(f"service account {namespace}/{account.name} has been deleted")
        bound = claims.binding
        for what, ref in (("secret", bound.secret), ("pod", bound.pod)):
            if ref is None:
                continue
            held = self.core.store.get(("", f"{what}s"), namespace, ref.name)
            if held is None:
                raise TokenError(INVALIDATED)
            held_uid = held["metadata"].get("uid", "")
            if held_uid != ref.uid:
                raise TokenError(
                    f"{what} UID ({held_uid}) does not match service account {what} ref claim "
                    f"({ref.uid})"
                )
            if self._deleted(held):
                raise TokenError(INVALIDATED)
        if bound.node is not None and bound.pod is None:
            # The local server keeps no Node objects, so a token bound to one has nothing to hold.
            raise TokenError(INVALIDATED)

    def _deleted(self, obj: dict[str, Any]) -> bool:
        """Deleted long enough ago that the leeway no longer covers it."""
        stamp = obj["metadata"].get("deletionTimestamp")
        if not stamp:
            return False
        deleted = datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
        return deleted < self.now() - serviceaccounts.LEEWAY
