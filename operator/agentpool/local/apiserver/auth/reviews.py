"""The reviews: asking the server who a token is and what a user may do, answered, never stored.

``TokenReview`` authenticates ``spec.token``, read as a bearer header's token, for
``spec.audiences``; ``SelfSubjectReview`` (``kubectl auth whoami``) tells the requester who it
is; ``SubjectAccessReview`` (cluster-wide), ``LocalSubjectAccessReview`` (in its namespace) and
``SelfSubjectAccessReview`` (the requester, ``kubectl auth can-i``) ask the authorizer about one
request's attributes, resource or non-resource; ``SelfSubjectRulesReview`` (``kubectl auth can-i
--list``) lists the requester's rules in a namespace. The bodies are checked as
``pkg/apis/authorization/validation`` checks them, with its messages, and answered in the shape
of the real REST handlers (the spec echoed, a ``status``). The review handler calls these with
the requester, the identities and the authorizer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentpool.local.apiserver.auth import rbac, users
from agentpool.local.apiserver.auth.attributes import Attributes
from agentpool.local.apiserver.auth.identities import Authenticated, Identities, bearer_token
from agentpool.local.apiserver.errors import ApiError, Cause, bad_request

AUTHENTICATION = "authentication.k8s.io"
AUTHORIZATION = "authorization.k8s.io"
Obj = dict[str, Any]

_EXACTLY_ONE = "exactly one of nonResourceAttributes or resourceAttributes must be specified"
_RESOURCE_FIELDS = ("namespace", "verb", "group", "version", "resource", "subresource", "name")


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
    # The real server authenticates a request carrying ``Authorization: Bearer <token>``.
    bearer = bearer_token(f"Bearer {token}")
    outcome = identities.authenticate(bearer, audiences) if bearer else Authenticated(None)
    status: Obj = {"user": {}}
    if outcome.user is not None:
        status = {"authenticated": True, "user": outcome.user.wire()}
        status["audiences"] = list(outcome.audiences)
    elif outcome.error:
        status["error"] = outcome.error
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


@dataclass(frozen=True)
class AccessReview:
    """A parsed access review: the attributes to decide and the spec to echo."""

    kind: str
    attributes: Attributes
    spec: Obj
    metadata: Obj


def access_review(
    kind: str, body: Any, *, requester: users.UserInfo, namespace: str = ""
) -> AccessReview:
    """A SubjectAccessReview, LocalSubjectAccessReview (in ``namespace``) or
    SelfSubjectAccessReview, checked and read into the attributes it asks about."""
    review = decode(kind, AUTHORIZATION, body)
    spec, meta = review.get("spec") or {}, review.get("metadata") or {}
    resource, non_resource = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if not all(isinstance(held, dict) for held in (spec, meta, resource or {}, non_resource or {})):
        raise bad_request(f"the object provided is unrecognized (must be of type {kind})")
    local = kind == "LocalSubjectAccessReview"
    if local and meta.get("namespace", namespace) != namespace:
        raise bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    asked = {f: _typed(kind, resource or {}, f, "ResourceAttributes") for f in _RESOURCE_FIELDS}
    path = _typed(kind, non_resource or {}, "path", "NonResourceAttributes")
    verb = _typed(kind, non_resource or {}, "verb", "NonResourceAttributes")
    causes = []
    if (resource is None) == (non_resource is None):
        shown = "null" if non_resource is None else _go_struct(path, verb)
        causes.append(Cause("spec", f"Invalid value: {shown}: {_EXACTLY_ONE}"))
    user = requester
    if kind != "SelfSubjectAccessReview":
        user = _subject(kind, spec)
        if not user.name and not user.groups:
            why = 'Invalid value: "": at least one of user or group must be specified'
            causes.append(Cause("spec.user", why))
    if local and resource is not None and asked["namespace"] != namespace:
        shown = json.dumps(asked["namespace"])
        why = f"Invalid value: {shown}: must match metadata.namespace"
        causes.append(Cause("spec.resourceAttributes.namespace", why))
    if local and non_resource is not None:
        why = f"Invalid value: {_go_struct(path, verb)}: disallowed on this kind of request"
        causes.append(Cause("spec.nonResourceAttributes", why))
    if set(meta) - {"creationTimestamp", *(("namespace",) if local else ())}:
        empty = "must be empty except for namespace" if local else "must be empty"
        causes.append(Cause("metadata", f"Invalid value: {json.dumps(meta)}: {empty}"))
    if causes:
        raise _invalid(causes)
    attributes = Attributes(user, verb, False, path=path)
    if resource is not None:
        attributes = Attributes(
            user,
            asked["verb"],
            True,
            api_group=asked["group"],
            api_version=asked["version"] or "*",
            namespace=asked["namespace"],
            resource=asked["resource"],
            subresource=asked["subresource"],
            name=asked["name"],
        )
    return AccessReview(kind, attributes, spec, {"namespace": namespace} if local else {})


def _subject(kind: str, spec: Obj) -> users.UserInfo:
    """Whom a (Local)SubjectAccessReview asks about; only the groups it names, none added."""
    where = "SubjectAccessReviewSpec.spec"
    return users.UserInfo(
        _typed(kind, spec, "user", where),
        _typed(kind, spec, "uid", where),
        tuple(_typed(kind, spec, "groups", where, strings=True)),
        _extra(kind, spec.get("extra") or {}),
    )


def access_answer(review: AccessReview, decision: rbac.Decision) -> Obj:
    status: Obj = {"allowed": decision.allowed}
    if decision.reason:
        status["reason"] = decision.reason
    return _answer(review.kind, AUTHORIZATION, review.metadata, review.spec, status)


def rules_review(body: Any, requester: users.UserInfo, policy: rbac.Policy) -> Obj:
    """``kubectl auth can-i --list``: every rule that applies to the requester in a namespace."""
    review = decode("SelfSubjectRulesReview", AUTHORIZATION, body)
    spec = review.get("spec") or {}
    namespace = _typed(
        "SelfSubjectRulesReview",
        spec if isinstance(spec, dict) else {},
        "namespace",
        "SelfSubjectRulesReviewSpec.spec",
    )
    if not namespace:
        raise bad_request("no namespace on request")
    rules, errors = rbac.rules_for(policy, requester, namespace)
    status: Obj = {
        "resourceRules": [_resource_rule(r) for r in rules if r.resources],
        "nonResourceRules": [
            {"verbs": list(r.verbs), "nonResourceURLs": list(r.non_resource_urls)}
            for r in rules
            if r.non_resource_urls
        ],
        "incomplete": False,
    }
    if errors:
        status["evaluationError"] = errors
    return _answer("SelfSubjectRulesReview", AUTHORIZATION, {}, {}, status)


def _resource_rule(rule: rbac.PolicyRule) -> Obj:
    body: Obj = {"verbs": list(rule.verbs)}
    if rule.api_groups:
        body["apiGroups"] = list(rule.api_groups)
    if rule.resources:
        body["resources"] = list(rule.resources)
    if rule.resource_names:
        body["resourceNames"] = list(rule.resource_names)
    return body


def _answer(kind: str, group: str, metadata: Obj, spec: Obj, status: Obj) -> Obj:
    return {
        "kind": kind,
        "apiVersion": f"{group}/v1",
        "metadata": metadata,
        "spec": spec,
        "status": status,
    }


def _extra(kind: str, extra: Any) -> dict[str, tuple[str, ...]]:
    if not isinstance(extra, dict) or not all(
        isinstance(v, list) and all(isinstance(s, str) for s in v) for v in extra.values()
    ):
        raise bad_request(
            f'{kind} in version "v1" cannot be handled as a {kind}: json: cannot unmarshal '
            "into Go struct field SubjectAccessReviewSpec.spec.extra of type map[string]ExtraValue"
        )
    return {str(k): tuple(v) for k, v in extra.items()}


def _go_struct(path: str, verb: str) -> str:
    """NonResourceAttributes as the validation message prints the internal struct."""
    return json.dumps({"Path": path, "Verb": verb}, separators=(",", ":"))


def _invalid(causes: list[Cause]) -> ApiError:
    """422 as these reviews get it: the kind is empty by then, so the message starts with a dot."""
    rendered = [cause.render() for cause in causes]
    errs = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
    details = {
        "group": AUTHORIZATION,
        "causes": [{"reason": c.reason, "message": c.message, "field": c.field} for c in causes],
    }
    return ApiError(422, "Invalid", f'.{AUTHORIZATION} "" is invalid: {errs}', details)
