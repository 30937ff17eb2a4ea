"""The reviews: asking the server who a token is, answered, never stored.

``TokenReview`` authenticates ``spec.token`` for ``spec.audiences``; ``SelfSubjectReview``
(``kubectl auth whoami``) tells the requester who it is. The bodies are read as the real REST
handlers read them, with their messages, and answered in their shape (the spec echoed, a
``status``). The review handler calls these with the requester and the identities.
"""

from __future__ import annotations

from typing import Any

from agentpool.local.apiserver.auth import users
from agentpool.local.apiserver.auth.identities import Identities
from agentpool.local.apiserver.errors import bad_request

AUTHENTICATION = "authentication.k8s.io"
Obj = dict[str, Any]


def decode(kind: str, group: str, body: Any) -> Obj:
    """The review the body holds, refused (400) when it is no object or another kind."""
    if not isinstance(body, dict):
        raise bad_request(
            f"the object provided is unrecognized (must be of type {kind}): couldn't get "
            "version/kind; json parse error: unexpected end of JSON input (<empty>)"
        )
    given = body.get("kind") or kind
    if given != kind:
        raise bad_request(
            f'{given} in version "v1" cannot be handled as a {kind}: converting (v1.{given}) '
            f"to ({group.split('.')[0]}.{kind}): unknown conversion"
        )
    return body


def _typed(kind: str, holder: Obj, key: str, where: str, *, strings: bool = False) -> Any:
    """A field of the body, 400 when it has the wrong JSON type, as decoding into Go refuses it."""
    value = holder.get(key)
    if value is None:
        return [] if strings else ""
    ok = (
        isinstance(value, list) and all(isinstance(v, str) for v in value)
        if strings
        else isinstance(value, str)
    )
    if not ok:
        wanted = "[]string" if strings else "string"
        raise bad_request(
            f'{kind} in version "v1" cannot be handled as a {kind}: json: cannot unmarshal '
            f"{_json_kind(value)} into Go struct field {where}.{key} of type {wanted}"
        )
    return value


def _json_kind(value: object) -> str:
    kinds = {bool: "bool", int: "number", float: "number", str: "string", list: "array"}
    return kinds.get(type(value), "object")


def token_review(body: Any, identities: Identities) -> Obj:
    """A TokenReview answered: who ``spec.token`` is, for the audiences it asks."""
    review = decode("TokenReview", AUTHENTICATION, body)
    spec = review.get("spec") or {}
    if not isinstance(spec, dict):
        spec = {}
    token = _typed("TokenReview", spec, "token", "TokenReviewSpec.spec")
    audiences = _typed("TokenReview", spec, "audiences", "TokenReviewSpec.spec", strings=True)
    if not token:
        raise bad_request("token is required for TokenReview in authentication")
    outcome = identities.authenticate(token, audiences)
    status: Obj = {}
    if outcome.user is not None:
        status = {"authenticated": True, "user": outcome.user.wire()}
        status["audiences"] = list(outcome.audiences)
    else:
        status = {"user": {}, "error": outcome.error}
    echoed = {"token": token, **({"audiences": audiences} if audiences else {})}
    return _answer("TokenReview", AUTHENTICATION, {}, echoed, status)


def self_subject_review(user: users.UserInfo, now: str) -> Obj:
    """``kubectl auth whoami``: the requester as the server sees it."""
    return {
        "kind": "SelfSubjectReview",
        "apiVersion": f"{AUTHENTICATION}/v1",
        "metadata": {"creationTimestamp": now},
        "status": {"userInfo": user.wire()},
    }


def _answer(kind: str, group: str, metadata: Obj, spec: Obj, status: Obj) -> Obj:
    return {
        "kind": kind,
        "apiVersion": f"{group}/v1",
        "metadata": metadata,
        "spec": spec,
        "status": status,
    }
