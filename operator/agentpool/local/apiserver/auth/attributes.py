"""What a request asks to do, in the terms an authorizer decides on, and the 403 when it may not.

kube-apiserver's RequestInfo reads every request's URL and method into attributes: a resource
request (``/api/v1/...``, ``/apis/GROUP/VERSION/...``) has a verb (``get``, ``list``, ``watch``,
``create``, ``update``, ``patch``, ``delete``, ``deletecollection``), an API group, a resource
and subresource, a namespace and a name; anything else (``/api``, ``/apis/GROUP``, ``/version``,
``/healthz``, ``/openapi/v3``) is a non-resource request with the lower-cased method as its verb
and the path. :func:`request_attributes` does the same, quirks included (a namespace's own URL
carries it as the namespace; a list whose field selector pins ``metadata.name`` carries the
name). :func:`forbidden` words the refusal as ``responsewriters.ForbiddenStatusError`` does. The
authentication middleware and the access reviews use them; pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agentpool.local.apiserver.auth.users import UserInfo
from agentpool.local.apiserver.errors import ApiError

_API_PREFIXES = ("api", "apis")
_NAMESPACE_SUBRESOURCES = ("status", "finalize")
_PATH_VERBS = ("watch", "proxy")
_METHOD_VERBS = {
    "POST": "create",
    "GET": "get",
    "HEAD": "get",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}


@dataclass(frozen=True)
class Attributes:
    """One request as an authorizer sees it."""

    user: UserInfo
    verb: str
    resource_request: bool
    path: str = ""
    api_group: str = ""
    api_version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""

    def by(self, user: UserInfo) -> Attributes:
        """The same request made by someone else (an impersonated user)."""
        return replace(self, user=user)


def request_attributes(
    user: UserInfo, method: str, path: str, query: Mapping[str, Sequence[str]]
) -> Attributes:
    """The attributes of a request, as RequestInfo reads its URL and method."""
    non_resource = Attributes(user, method.lower(), resource_request=False, path=path)
    parts = path.strip("/").split("/") if path.strip("/") else []
    if len(parts) < 3 or parts[0] not in _API_PREFIXES:
        return non_resource
    prefix, parts = parts[0], parts[1:]
    group = ""
    if prefix == "apis":
        if len(parts) < 3:
            return non_resource
        group, parts = parts[0], parts[1:]
    version, parts = parts[0], parts[1:]
    verb = _METHOD_VERBS.get(method.upper(), "")
    if parts[0] in _PATH_VERBS and len(parts) > 1:
        # The old /watch/... and /proxy/... forms: the verb is in the path.
        verb, parts = parts[0], parts[1:]
    namespace = ""
    if parts[0] == "namespaces" and len(parts) > 1:
        namespace = parts[1]
        if len(parts) > 2 and parts[2] not in _NAMESPACE_SUBRESOURCES:
            parts = parts[2:]
    resource = parts[0]
    name = parts[1] if len(parts) > 1 else ""
    subresource = parts[2] if len(parts) > 2 and verb != "proxy" else ""
    if not name and verb == "get":
        verb = "watch" if _watching(query) else "list"
        name = _pinned_name(query)
    if not name and verb == "delete":
        verb = "deletecollection"
    return Attributes(
        user, verb, True, path, group, version, namespace, resource, subresource, name
    )


def _watching(query: Mapping[str, Sequence[str]]) -> bool:
    values = query.get("watch") or ()
    return bool(values) and values[0] != "0" and values[0].lower() != "false"


def _pinned_name(query: Mapping[str, Sequence[str]]) -> str:
    """The name a field selector requires exactly (``metadata.name=x``), if a valid one."""
    for selector in (query.get("fieldSelector") or ())[:1]:
        for term in selector.split(","):
            for operator in ("==", "="):
                key, found, value = term.partition(operator)
                if found and key.strip() == "metadata.name":
                    value = value.strip()
                    if value and value not in (".", "..") and not set(value) & {"/", "%"}:
                        return value
                    return ""
    return ""


def describe(attributes: Attributes) -> str:
    """What the user may not do, in the words of the 403 message."""
    who = f"User {_quoted(attributes.user.name)} cannot {attributes.verb}"
    if not attributes.resource_request:
        return f"{who} path {_quoted(attributes.path)}"
    resource = attributes.resource
    if attributes.subresource:
        resource = f"{resource}/{attributes.subresource}"
    what = f"{who} resource {_quoted(resource)} in API group {_quoted(attributes.api_group)}"
    if attributes.namespace:
        return f"{what} in the namespace {_quoted(attributes.namespace)}"
    return f"{what} at the cluster scope"


def forbidden(attributes: Attributes, reason: str = "") -> ApiError:
    """The 403 a real server answers when the attributes are not authorized."""
    message = _sanitized(describe(attributes))
    if reason:
        message = f"{message}: {reason}"
    group, resource, name = attributes.api_group, attributes.resource, attributes.name
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    if resource:
        details["kind"] = resource
    if not (group or resource):
        return ApiError(403, "Forbidden", f"forbidden: {message}", details)
    qualified = f"{resource}.{group}" if group else resource
    subject = f"{qualified} {_quoted(name)}" if name else qualified
    return ApiError(403, "Forbidden", f"{subject} is forbidden: {message}", details)


def _quoted(text: str) -> str:
    """A string as Go's ``%q`` quotes it (for the names a request can carry)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def _sanitized(text: str) -> str:
    # The server escapes what could read as HTML in a 403 message; quotes are left alone.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
