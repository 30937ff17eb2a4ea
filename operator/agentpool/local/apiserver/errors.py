"""API errors as the Kubernetes API server words them: Status objects with real reasons.

Every failure the local API server reports is an ``ApiError`` carrying the HTTP code, the reason
and the message a real API server would send, because kubectl prints them verbatim and kopf and
the kubernetes client branch on the code. The request handlers turn an ``ApiError`` into a
``Status`` body; the store, the patch engine and the validators raise them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentpool.local.apiserver.resources import ResourceType


@dataclass(frozen=True)
class Cause:
    """One field-level reason an object is invalid."""

    field: str
    message: str
    reason: str = "FieldValueInvalid"

    def render(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class ApiError(Exception):
    """A failed request, rendered as a ``Status`` object."""

    def __init__(
        self, code: int, reason: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:
            body["reason"] = self.reason
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def _details(rt: ResourceType, name: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": rt.plural}
    if rt.group:
        details["group"] = rt.group
    return details


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{rt.group_resource} "{name}" not found', _details(rt, name))


def already_exists(rt: ResourceType, name: str) -> ApiError:
    message = f'{rt.group_resource} "{name}" already exists'
    return ApiError(409, "AlreadyExists", message, _details(rt, name))


def conflict(rt: ResourceType, name: str, why: str | None = None) -> ApiError:
    why = why or (
        "the object has been modified; please apply your changes to the latest version "
        "and try again"
    )
    message = f'Operation cannot be fulfilled on {rt.group_resource} "{name}": {why}'
    return ApiError(409, "Conflict", message, _details(rt, name))


def invalid(rt: ResourceType, name: str, causes: list[Cause]) -> ApiError:
    rendered = [cause.render() for cause in causes]
    errs = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
    qualified = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    details: dict[str, Any] = {
        "name": name,
        "kind": rt.kind,
        "causes": [{"reason": c.reason, "message": c.message, "field": c.field} for c in causes],
    }
    if rt.group:
        details["group"] = rt.group
    return ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: {errs}', details)


def expired(requested: int, oldest: int) -> ApiError:
    return ApiError(410, "Expired", f"too old resource version: {requested} ({oldest})")


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def forbidden(rt: ResourceType, name: str, why: str) -> ApiError:
    message = f'{rt.group_resource} "{name}" is forbidden: {why}'
    return ApiError(403, "Forbidden", message, _details(rt, name))


def method_not_allowed(verb: str, rt: ResourceType) -> ApiError:
    message = f'{verb} is not supported on resources of kind "{rt.group_resource}"'
    details: dict[str, Any] = {"kind": rt.plural}
    if rt.group:
        details["group"] = rt.group
    return ApiError(405, "MethodNotAllowed", message, details)


def method_not_supported() -> ApiError:
    """A verb the resource does not serve (a GET of tokenreviews, a DELETE of a collection of
    namespaces): kube-apiserver answers this without naming the resource."""
    return ApiError(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        {},
    )


def aggregate(messages: Sequence[str]) -> str:
    """Several errors in one message, as apimachinery's ``NewAggregate`` words them: one as it is,
    more bracketed and comma-separated with repeats dropped."""
    unique = list(dict.fromkeys(messages))
    if len(unique) <= 1:
        return unique[0] if unique else ""
    return "[" + ", ".join(unique) + "]"


def unsupported_media_type(message: str) -> ApiError:
    return ApiError(415, "UnsupportedMediaType", message)


def not_acceptable(message: str) -> ApiError:
    return ApiError(406, "NotAcceptable", message)


def unprocessable(message: str) -> ApiError:
    """A 422 without field causes, as the server answers a failed JSON patch ``test``."""
    return ApiError(422, "Invalid", message)
