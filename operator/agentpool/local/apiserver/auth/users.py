"""Who a request comes from: the user the API server authenticated, in the server's own words.

A real API server hands every later step a ``user.Info`` (name, uid, groups, extra); ``UserInfo``
is that value here. The names that mean something to the server live here too: ``system:masters``
(allowed everything), ``system:authenticated`` (every authenticated user), and the
service-account usernames and groups (``system:serviceaccount:NS:NAME``,
``system:serviceaccounts``, ``system:serviceaccounts:NS``), made and split as k8s.io/apiserver's
serviceaccount package does. The authenticators, impersonation, RBAC and the review endpoints
share them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"
NODES = "system:nodes"
ALL_SERVICE_ACCOUNTS = "system:serviceaccounts"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
NODE_PREFIX = "system:node:"

#: The extra keys a service-account token puts on its user.
POD_NAME = "authentication.kubernetes.io/pod-name"
POD_UID = "authentication.kubernetes.io/pod-uid"
NODE_NAME = "authentication.kubernetes.io/node-name"
NODE_UID = "authentication.kubernetes.io/node-uid"
CREDENTIAL_ID = "authentication.kubernetes.io/credential-id"

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@dataclass(frozen=True)
class UserInfo:
    """An authenticated (or impersonated) user: name, uid, groups and extra, as the server keeps
    them for the rest of the request."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)

    def wire(self) -> dict[str, Any]:
        """The ``UserInfo`` of TokenReview and SelfSubjectReview status, empty fields left out."""
        body: dict[str, Any] = {}
        if self.name:
            body["username"] = self.name
        if self.uid:
            body["uid"] = self.uid
        if self.groups:
            body["groups"] = list(self.groups)
        if self.extra:
            body["extra"] = {key: list(values) for key, values in self.extra.items()}
        return body


def service_account_username(namespace: str, name: str) -> str:
    return f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"


def service_account_groups(namespace: str) -> tuple[str, str]:
    return (ALL_SERVICE_ACCOUNTS, f"{ALL_SERVICE_ACCOUNTS}:{namespace}")


def split_service_account(username: str) -> tuple[str, str] | None:
    """The namespace and name a service-account username names; None for any other username,
    including one whose namespace or name could not be an object's."""
    if not username.startswith(SERVICE_ACCOUNT_PREFIX):
        return None
    parts = username[len(SERVICE_ACCOUNT_PREFIX) :].split(":")
    if len(parts) != 2:
        return None
    namespace, name = parts
    if len(namespace) > 63 or not _LABEL.fullmatch(namespace):
        return None
    if len(name) > 253 or not _SUBDOMAIN.fullmatch(name):
        return None
    return namespace, name


def matches_service_account(namespace: str, name: str, username: str) -> bool:
    """Whether the username is that service account's (RBAC's subject match)."""
    return username == service_account_username(namespace, name)


def split_node(username: str) -> str | None:
    """The node a ``system:node:NAME`` username names, or None."""
    if not username.startswith(NODE_PREFIX):
        return None
    name = username[len(NODE_PREFIX) :]
    return name if len(name) <= 253 and _SUBDOMAIN.fullmatch(name) else None


def with_group(groups: tuple[str, ...], group: str) -> tuple[str, ...]:
    """The groups with one more at the end, unless it is there already."""
    return groups if group in groups else (*groups, group)
