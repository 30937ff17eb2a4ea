"""Acting as someone else: the ``Impersonate-*`` headers, as kube-apiserver v1.37 honours them.

``kubectl --as=USER --as-group=G`` sends ``Impersonate-User``, ``Impersonate-Group`` (repeated),
``Impersonate-Uid`` and ``Impersonate-Extra-KEY``; the server then handles the request as that
user, once the requester has been allowed to impersonate it. v1.37 runs constrained
impersonation (KEP 5284, on by default): it tries, in order, the modes that could apply
(associated node, arbitrary node, service account, user info, then the legacy ``impersonate``
verb) and takes the first that allows, else reports the first refusal. A constrained mode
needs ``impersonate-on:MODE:VERB`` on the request itself and ``impersonate:MODE`` on the user,
uid, groups and extra (in ``authentication.k8s.io``); the legacy mode needs ``impersonate`` on
``users``, ``groups``, ``serviceaccounts`` (core group) and ``uids``, ``userextras``. A service
account impersonated without groups gets the service-account groups; every user but
``system:anonymous`` gets ``system:authenticated`` unless ``system:unauthenticated`` was asked
for. Pure: the caller passes the request's attributes and the authorizer as a function. The
authentication middleware calls :func:`wanted` and :func:`impersonate`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from urllib.parse import unquote

from agentpool.local.apiserver.auth import users
from agentpool.local.apiserver.auth.attributes import Attributes, forbidden
from agentpool.local.apiserver.auth.rbac import Decision
from agentpool.local.apiserver.errors import ApiError, bad_request

USER_HEADER = "Impersonate-User"
UID_HEADER = "Impersonate-Uid"
GROUP_HEADER = "Impersonate-Group"
EXTRA_PREFIX = "Impersonate-Extra-"
AUTHENTICATION = "authentication.k8s.io"
#: From this many groups or extra values on, a constrained mode first asks once for all (``*``).
MANY = 4

Authorizer = Callable[[Attributes], Decision]
_DOMAIN_PATH = re.compile(r"([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)+[a-z0-9]([-a-z0-9]*[a-z0-9])?/\S+")


@dataclass(frozen=True)
class Wanted:
    """Who the headers ask to act as, exactly as asked."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)

    @property
    def only_name(self) -> bool:
        return not (self.uid or self.groups or self.extra)


def wanted(headers: Iterable[tuple[str, str]]) -> Wanted | None:
    """The impersonation the headers ask for; None when they ask none; 400 for groups, uid or
    extra without a user."""
    name = uid = ""
    groups: list[str] = []
    extra: dict[str, tuple[str, ...]] = {}
    for header, value in headers:
        lowered = header.lower()
        if lowered == USER_HEADER.lower():
            name = name or value
        elif lowered == UID_HEADER.lower():
            uid = uid or value
        elif lowered == GROUP_HEADER.lower():
            groups.append(value)
        elif lowered.startswith(EXTRA_PREFIX.lower()):
            key = unquote(lowered[len(EXTRA_PREFIX) :])
            extra[key] = (*extra.get(key, ()), value)
    if not name and (uid or groups or extra):
        raise bad_request(
            f"requested &user.DefaultInfo{{Name:{_go(name)}, UID:{_go(uid)}, "
            f"Groups:{_go_list(groups)}, Extra:{_go_map(extra)}}} without impersonating a user name"
        )
    if not name:
        return None
    return Wanted(name, uid, tuple(groups), extra)


def impersonate(want: Wanted, request: Attributes, authorize: Authorizer) -> users.UserInfo:
    """The user the request runs as, once the requester may act as it; else the 403 of the first
    mode that applied and refused."""
    first: ApiError | None = None
    for mode in _modes(want, request.user):
        try:
            return _check(mode, want, request, authorize)
        except ApiError as refusal:
            first = first or refusal
    assert first is not None, "the legacy mode applies to every request"
    raise first


def _modes(want: Wanted, requester: users.UserInfo) -> list[str]:
    node = users.split_node(want.name)
    account = users.split_service_account(want.name)
    modes = []
    if want.only_name and node is not None:
        if users.split_service_account(requester.name) is not None and requester.extra.get(
            users.NODE_NAME
        ) == (node,):
            modes.append("associated-node")
        modes.append("arbitrary-node")
    if want.only_name and account is not None:
        modes.append("serviceaccount")
    if node is None and account is None:
        modes.append("user-info")
    return [*modes, "legacy"]


def _check(mode: str, want: Wanted, request: Attributes, authorize: Authorizer) -> users.UserInfo:
    constrained = mode != "legacy"
    requester = request.user
    if constrained:
        _require(authorize, replace(request, verb=f"impersonate-on:{mode}:{request.verb}"))
    verb = f"impersonate:{mode}" if constrained else "impersonate"
    group = AUTHENTICATION if constrained else ""

    def asked(resource: str, name: str, *, on: str = group) -> Attributes:
        return Attributes(requester, verb, True, api_group=on, resource=resource, name=name)

    groups = want.groups
    target = asked("users", want.name)
    node = users.split_node(want.name) if constrained else None
    account = users.split_service_account(want.name)
    if node is not None:
        target = asked("nodes", "*" if mode == "associated-node" else node)
        if want.groups:
            raise forbidden(
                target, f"when impersonating a node, cannot impersonate groups {_q(want.groups)}"
            )
        groups = (users.NODES,)
    if account is not None:
        target = replace(asked("serviceaccounts", account[1]), namespace=account[0])
        if constrained and want.groups:
            listed = _q(want.groups)
            why = f"when impersonating a service account, cannot impersonate groups {listed}"
            raise forbidden(target, why)
        groups = groups or users.service_account_groups(account[0])
    _require(authorize, target)
    if want.uid:
        _require(authorize, asked("uids", want.uid, on=AUTHENTICATION))
    _check_groups(want.groups, asked("groups", ""), authorize, constrained=constrained)
    _check_extra(
        want.extra, asked("userextras", "", on=AUTHENTICATION), authorize, constrained=constrained
    )
    if want.name == users.ANONYMOUS:
        groups = users.with_group(groups, users.UNAUTHENTICATED)
    elif users.UNAUTHENTICATED not in groups:
        groups = users.with_group(groups, users.AUTHENTICATED)
    return users.UserInfo(want.name, want.uid, groups, want.extra)


def _check_groups(
    groups: tuple[str, ...], asked: Attributes, authorize: Authorizer, *, constrained: bool
) -> None:
    if not groups:
        return
    if constrained and "" in groups:
        raise forbidden(asked, "impersonating the empty string group is not allowed")
    if constrained and users.MASTERS in groups:
        raise forbidden(
            replace(asked, name=users.MASTERS),
            "impersonating the system:masters group is not allowed",
        )
    if constrained and len(groups) >= MANY and authorize(replace(asked, name="*")).allowed:
        return
    for group in groups:
        _require(authorize, replace(asked, name=group))


def _check_extra(
    extra: Mapping[str, tuple[str, ...]],
    asked: Attributes,
    authorize: Authorizer,
    *,
    constrained: bool,
) -> None:
    if not extra:
        return
    if constrained:
        problem = _extra_problem(extra)
        if problem:
            raise forbidden(asked, problem)
        count = sum(len(v) for v in extra.values())
        if (len(extra) >= MANY or count >= MANY) and authorize(
            replace(asked, subresource="*", name="*")
        ).allowed:
            return
    for key, values in extra.items():
        for value in values:
            _require(authorize, replace(asked, subresource=key, name=value))


def _extra_problem(extra: Mapping[str, tuple[str, ...]]) -> str:
    for key, values in extra.items():
        if not key:
            return "impersonating the empty string key in extra is not allowed"
        if not _DOMAIN_PATH.fullmatch(key):
            return (
                "impersonating an invalid key in extra is not allowed: extra.key: Invalid value: "
                f'{_go(key)}: must be a domain-prefixed path (such as "acme.io/foo")'
            )
        if key != key.lower():
            return f"impersonating a non-lowercase key in extra is not allowed: {_go(key)}"
        if not values:
            return "impersonating empty values in extra is not allowed"
        if "" in values:
            return "impersonating the empty string value in extra is not allowed"
    return ""


def _require(authorize: Authorizer, asked: Attributes) -> None:
    decision = authorize(asked)
    if not decision.allowed:
        raise forbidden(asked, decision.reason)


def _go(text: str) -> str:
    return json.dumps(text)


def _q(values: Iterable[str]) -> str:
    return "[" + " ".join(_go(v) for v in values) + "]"


def _go_list(values: list[str]) -> str:
    if not values:
        return "[]string(nil)"
    return "[]string{" + ", ".join(_go(v) for v in values) + "}"


def _go_map(values: Mapping[str, tuple[str, ...]]) -> str:
    if not values:
        return "map[string][]string(nil)"
    entries = ", ".join(f"{_go(k)}:{_go_list(list(v))}" for k, v in sorted(values.items()))
    return "map[string][]string{" + entries + "}"
