"""TokenRequest: ``POST .../serviceaccounts/NAME/token`` issues a token for that service account.

As ``pkg/registry/core/serviceaccount/storage/token.go`` does: the account must exist (404
otherwise), a uid in the request must be its uid (409), ``spec.audiences`` default to the API
server's and ``spec.expirationSeconds`` to 3600, at least 600 and at most 2^32 (422 with the real
message); a ``boundObjectRef`` to a Pod (whose service account it must be, and whose node the
token names) or a Secret binds the token to that object, and a kubelet asking for 3607 seconds
for a pod gets a year with a ``warnafter`` at the hour. The answer is the request with its
metadata filled in from the account and a ``status`` holding the signed token and its expiry.
``kubectl create token`` and the local kubelet use it; the resource handler calls
:func:`request_token` for the ``token`` subresource.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from agentpool.api.conditions import format_time
from agentpool.local.apiserver.auth import jwt, serviceaccounts
from agentpool.local.apiserver.auth.identities import Identities
from agentpool.local.apiserver.auth.serviceaccounts import Binding, Ref
from agentpool.local.apiserver.errors import ApiError, Cause, bad_request, not_found
from agentpool.local.apiserver.registry.core import Core
from agentpool.local.apiserver.resources import ResourceType

GROUP = "authentication.k8s.io"
KIND = "TokenRequest"
Obj = dict[str, Any]


def _invalid(name: str, cause: Cause) -> ApiError:
    details: Obj = {"group": GROUP, "kind": KIND}
    if name:
        details = {"name": name, **details}
    details["causes"] = [{"reason": cause.reason, "message": cause.message, "field": cause.field}]
    message = f'{KIND}.{GROUP} "{name}" is invalid: {cause.render()}'
    return ApiError(422, "Invalid", message, details)


def _conflict(resource: str, name: str, why: str, group: str = "") -> ApiError:
    qualified = f"{resource}.{group}" if group else resource
    details: Obj = {"name": name, **({"group": group} if group else {}), "kind": resource}
    message = f'Operation cannot be fulfilled on {qualified} "{name}": {why}'
    return ApiError(409, "Conflict", message, details)


def _parse(body: Any) -> Obj:
    if body is None:
        raise bad_request(
            f"the object provided is unrecognized (must be of type {KIND}): couldn't get "
            "version/kind; json parse error: unexpected end of JSON input (<empty>)"
        )
    if not isinstance(body, dict):
        raise bad_request(f"the object provided is unrecognized (must be of type {KIND})")
    kind = body.get("kind") or KIND
    if kind != KIND:
        raise bad_request(
            f'{kind} in version "v1" cannot be handled as a {KIND}: converting to {KIND}: '
            "unknown conversion"
        )
    return body


def request_token(
    core: Core, identities: Identities, accounts: ResourceType, namespace: str, name: str, body: Any
) -> Obj:
    """Issue a token for the service account, as the request asks; the TokenRequest answered."""
    request = _parse(body)
    meta = request.get("metadata") or {}
    spec = request.get("spec") or {}
    core.check_namespace(accounts, namespace, name)
    for field, given in (("name", meta.get("name")), ("namespace", meta.get("namespace"))):
        if given and given != (name if field == "name" else namespace):
            why = f"must match the service account {field} if specified"
            raise _invalid(name, Cause(f"metadata.{field}", f'Invalid value: "{given}": {why}'))
    account = core.store.get(accounts.key, namespace, name)
    if account is None:
        raise not_found(accounts, name)
    uid = account["metadata"]["uid"]
    if meta.get("uid") and meta["uid"] != uid:
        why = (
            f"the UID in the token request ({meta['uid']}) does not match the UID of the "
            f"service account ({uid})"
        )
        raise _conflict(KIND, name, why, GROUP)
    audiences = list(spec.get("audiences") or serviceaccounts.API_AUDIENCES)
    seconds = spec.get("expirationSeconds", serviceaccounts.DEFAULT_SECONDS)
    if not isinstance(seconds, int) or isinstance(seconds, bool):
        raise bad_request(
            f'{KIND} in version "v1" cannot be handled as a {KIND}: json: cannot unmarshal '
            f"into Go struct field TokenRequestSpec.spec.expirationSeconds of type int64"
        )
    if seconds < serviceaccounts.MIN_SECONDS:
        why = "may not specify a duration less than 10 minutes"
        raise _invalid("", Cause("spec.expirationSeconds", f"Invalid value: {seconds}: {why}"))
    if seconds > serviceaccounts.MAX_SECONDS:
        why = "may not specify a duration larger than 2^32 seconds"
        raise _invalid("", Cause("spec.expirationSeconds", f"Invalid value: {seconds}: {why}"))
    ref = spec.get("boundObjectRef")
    binding = _bind(core, namespace, name, ref) if isinstance(ref, dict) else Binding()
    now = core.clock()
    lifetime, warn_after = seconds, 0
    kube_audiences = all(a in serviceaccounts.API_AUDIENCES for a in audiences)
    if binding.pod is not None and seconds == serviceaccounts.WARN_ONLY_SECONDS and kube_audiences:
        lifetime, warn_after = serviceaccounts.EXTENDED_SECONDS, seconds
    issued = int(now.timestamp())
    claims = serviceaccounts.claims(
        namespace,
        Ref(name, uid),
        audiences=audiences,
        now=issued,
        seconds=lifetime,
        jti=str(uuid.uuid4()),
        binding=binding,
        warn_after=warn_after,
    )
    expiry = datetime.fromtimestamp(issued + seconds, UTC)
    return {
        "kind": KIND,
        "apiVersion": f"{GROUP}/v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "creationTimestamp": format_time(now),
        },
        "spec": {
            "audiences": audiences,
            "expirationSeconds": seconds,
            "boundObjectRef": ref if isinstance(ref, dict) else None,
        },
        "status": {
            "token": jwt.sign(claims, identities.key),
            "expirationTimestamp": format_time(expiry),
        },
    }


def _bind(core: Core, namespace: str, account: str, ref: Obj) -> Binding:
    """The object a token is to be bound to, which must exist (and be the account's pod)."""
    api_version, kind = str(ref.get("apiVersion", "")), str(ref.get("kind", ""))
    group, _, version = api_version.rpartition("/")
    name = str(ref.get("name", ""))
    if group or kind not in ("Pod", "Secret", "Node"):
        raise bad_request(f"cannot bind token to object of type {group}/{version}, Kind={kind}")
    plural = f"{kind.lower()}s"
    scope = "" if kind == "Node" else namespace
    held = core.store.get(("", plural), scope, name)
    if held is None:
        raise ApiError(
            404, "NotFound", f'{plural} "{name}" not found', {"name": name, "kind": plural}
        )
    uid = held["metadata"].get("uid", "")
    if ref.get("uid") and ref["uid"] != uid:
        why = (
            f"the UID in the bound object reference ({ref['uid']}) does not match the UID in "
            "record. The object might have been deleted and then recreated"
        )
        raise _conflict(kind, name, why)
    if kind == "Secret":
        return Binding(secret=Ref(name, uid))
    if kind == "Node":
        return Binding(node=Ref(name, uid))
    spec = held.get("spec") or {}
    if spec.get("serviceAccountName") != account:
        raise bad_request(
            f'cannot bind token for serviceaccount "{account}" to pod running with different '
            "serviceaccount name."
        )
    node_name = spec.get("nodeName")
    node = None
    if node_name:
        found = core.store.get(("", "nodes"), "", node_name)
        node = Ref(node_name, found["metadata"].get("uid", "") if found else "")
    return Binding(pod=Ref(name, uid), node=node)
