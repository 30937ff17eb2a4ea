"""Table tests of the authorizer's pure core: RBAC rules and bindings as kube-apiserver matches
them, the request attributes it decides on, and the impersonation modes of v1.37.

Every expectation here was checked against kube-apiserver v1.37.2: the matcher's forms
(``*``, ``resource/subresource``, ``*/subresource``; ``resource/*`` is no wildcard), the binding
order and the reason's wording, the RequestInfo quirks, and which impersonation check a refusal
names. The same decisions are asked of a running server in ``test_apiserver_access.py``.
"""

from __future__ import annotations

import pytest

from agentpool.local.apiserver.auth import impersonation, rbac
from agentpool.local.apiserver.auth.attributes import Attributes, forbidden, request_attributes
from agentpool.local.apiserver.auth.users import UserInfo
from agentpool.local.apiserver.errors import ApiError

NS = "team"
ACCOUNT = UserInfo(
    "system:serviceaccount:team:caller",
    "uid-1",
    ("system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated"),
)
ALICE = UserInfo("alice", groups=("devs", "system:authenticated"))
CALLER = 'User "system:serviceaccount:team:caller"'
IN_TEAM = 'in the namespace "team"'
MASTER = UserInfo("admin", groups=("system:masters", "system:authenticated"))


def _rule(
    verbs: str, groups: str = "", resources: str = "", **more: tuple[str, ...]
) -> rbac.PolicyRule:
    return rbac.PolicyRule(
        verbs=tuple(verbs.split()),
        api_groups=tuple(groups.split(",")) if resources else (),
        resources=tuple(resources.split()),
        resource_names=more.get("names", ()),
        non_resource_urls=more.get("urls", ()),
    )


def _binding(
    name: str, kind: str, role: str, *subjects: rbac.Subject, namespace: str = ""
) -> rbac.Binding:
    return rbac.Binding(name, kind, role, subjects, namespace)


POLICY = rbac.Policy(
    roles={(NS, "reader"): (_rule("get list", "", "configmaps"),)},
    cluster_roles={
        "caller": (_rule("create", "agentpool.dev", "agentpools/call"),),
        "named": (_rule("get", "agentpool.dev", "agentpools", names=("alpha",)),),
        "statuses": (_rule("get", "*", "*/status"),),
        "pools-any-sub": (_rule("create", "agentpool.dev", "agentpools/*"),),
        "everything": (_rule("*", "*", "*"),),
        "discovery": (_rule("get", urls=("/apis", "/apis/*", "/version")),),
    },
    cluster_role_bindings=(
        _binding("devs-status", "ClusterRole", "statuses", rbac.Subject("Group", "devs")),
        _binding(
            "discovery", "ClusterRole", "discovery", rbac.Subject("Group", "system:authenticated")
        ),
        _binding("gone", "ClusterRole", "missing", rbac.Subject("User", "carol")),
    ),
    role_bindings={
        NS: (
            _binding(
                "call",
                "ClusterRole",
                "caller",
                rbac.Subject("ServiceAccount", "caller"),
                namespace=NS,
            ),
            _binding(
                "named",
                "ClusterRole",
                "named",
                rbac.Subject("ServiceAccount", "caller", NS),
                namespace=NS,
            ),
            _binding("read", "Role", "reader", rbac.Subject("User", "alice"), namespace=NS),
            _binding(
                "any-sub",
                "ClusterRole",
                "pools-any-sub",
                rbac.Subject("User", "dave"),
                namespace=NS,
            ),
            _binding(
                "everything",
                "ClusterRole",
                "everything",
                rbac.Subject("Group", "team-admins"),
                namespace=NS,
            ),
            _binding(
                "carol-missing", "Role", "absent", rbac.Subject("User", "carol"), namespace=NS
            ),
        ),
        "other": (
            # A ServiceAccount subject that names no namespace is the binding's namespace's.
            _binding(
                "named",
                "ClusterRole",
                "named",
                rbac.Subject("ServiceAccount", "caller"),
                namespace="other",
            ),
            _binding(
                "call",
                "ClusterRole",
                "caller",
                rbac.Subject("ServiceAccount", "caller", NS),
                namespace="other",
            ),
        ),
    },
)


def _by(binding: str, role: str, subject: str) -> str:
    """The reason RBAC gives for an allowed request."""
    return f"RBAC: allowed by {binding} of {role} to {subject}"


DISCOVERED = _by(
    'ClusterRoleBinding "discovery"', 'ClusterRole "discovery"', 'Group "system:authenticated"'
)
CALLED = _by('RoleBinding "call/team"', 'ClusterRole "caller"', 'ServiceAccount "caller/team"')


def _ask(
    user: UserInfo,
    verb: str,
    resource: str = "",
    *,
    namespace: str = NS,
    group: str = "agentpool.dev",
    name: str = "",
    path: str = "",
) -> Attributes:
    if path:
        return Attributes(user, verb, False, path=path)
    plural, _, sub = resource.partition("/")
    return Attributes(
        user,
        verb,
        True,
        api_group=group,
        namespace=namespace,
        resource=plural,
        subresource=sub,
        name=name,
    )


@pytest.mark.parametrize(
    ("request_", "allowed", "reason"),
    [
        # A RoleBinding to a ClusterRole grants the subresource, in its namespace only.
        (_ask(ACCOUNT, "create", "agentpools/call", name="pool"), True, CALLED),
        (_ask(ACCOUNT, "create", "agentpools/call", namespace="elsewhere"), False, ""),
        (_ask(ACCOUNT, "create", "agentpools/call", namespace=""), False, ""),
        # A binding in another namespace grants there, and names that binding.
        (
            _ask(ACCOUNT, "create", "agentpools/call", namespace="other"),
            True,
            _by('RoleBinding "call/other"', 'ClusterRole "caller"', 'ServiceAccount "caller/team"'),
        ),
        # The verb, the subresource, the group must all match.
        (_ask(ACCOUNT, "get", "agentpools/call"), False, ""),
        (_ask(ACCOUNT, "create", "agentpools/cast"), False, ""),
        (_ask(ACCOUNT, "create", "agentpools"), False, ""),
        (_ask(ACCOUNT, "create", "agentpools/call", group="other.dev"), False, ""),
        # resourceNames limit a rule to those names; a request without a name is not one of them.
        (
            _ask(ACCOUNT, "get", "agentpools", name="alpha"),
            True,
            _by('RoleBinding "named/team"', 'ClusterRole "named"', 'ServiceAccount "caller/team"'),
        ),
        (_ask(ACCOUNT, "get", "agentpools", name="beta"), False, ""),
        (_ask(ACCOUNT, "get", "agentpools", name="alpha", namespace="other"), False, ""),
        (_ask(ACCOUNT, "get", "agentpools"), False, ""),
        # A Role of the binding's namespace, granted to a User.
        (
            _ask(ALICE, "list", "configmaps", group=""),
            True,
            _by('RoleBinding "read/team"', 'Role "reader"', 'User "alice"'),
        ),
        (_ask(ALICE, "delete", "configmaps", group=""), False, ""),
        # */status grants every resource's status, cluster-wide through a ClusterRoleBinding to a
        # Group, and nothing but the status.
        (
            _ask(ALICE, "get", "pods/status", group="", namespace="anywhere"),
            True,
            _by('ClusterRoleBinding "devs-status"', 'ClusterRole "statuses"', 'Group "devs"'),
        ),
        (_ask(ALICE, "get", "pods", group="", namespace="anywhere"), False, ""),
        (_ask(ALICE, "get", "pods/log", group=""), False, ""),
        # agentpools/* is no wildcard: it matches only a subresource literally named "*".
        (_ask(UserInfo("dave"), "create", "agentpools/call"), False, ""),
        # "*" everywhere grants everything in the namespace, to a group's members.
        (
            _ask(UserInfo("erin", groups=("team-admins",)), "delete", "agentpools/call"),
            True,
            _by('RoleBinding "everything/team"', 'ClusterRole "everything"', 'Group "team-admins"'),
        ),
        (
            _ask(UserInfo("erin", groups=("team-admins",)), "delete", "agentpools", namespace="x"),
            False,
            "",
        ),
        # Non-resource URLs: exact, or a prefix ending in "*"; "/apis/*" is not "/apis".
        (
            _ask(ALICE, "get", path="/apis/agentpool.dev/v1alpha1"),
            True,
            DISCOVERED,
        ),
        (
            _ask(ALICE, "get", path="/apis"),
            True,
            DISCOVERED,
        ),
        (_ask(ALICE, "get", path="/version/"), False, ""),
        (_ask(ALICE, "post", path="/apis"), False, ""),
        (_ask(UserInfo("nobody"), "get", path="/apis"), False, ""),
        # A binding whose role is missing is an error the denial reports; allowing ignores it.
        (
            _ask(UserInfo("carol"), "get", "pods", group=""),
            False,
            'rbac: RBAC: [clusterrole.rbac.authorization.k8s.io "missing" not found, '
            'role.rbac.authorization.k8s.io "absent" not found]',
        ),
        (
            _ask(UserInfo("carol"), "get", "pods", group="", namespace="other"),
            False,
            'rbac: RBAC: clusterrole.rbac.authorization.k8s.io "missing" not found',
        ),
        # system:masters may do anything, and the decision gives no reason.
        (_ask(MASTER, "delete", "nodes", group="", namespace=""), True, ""),
    ],
)
def test_rbac_decides_as_kube_apiserver(request_: Attributes, allowed: bool, reason: str) -> None:
    """Each request is allowed or denied as the real authorizer chain decides it, with its
    reason."""
    assert rbac.decide(POLICY, request_) == rbac.Decision(allowed, reason)


@pytest.mark.parametrize(
    ("subject", "user", "applies"),
    [
        (rbac.Subject("ServiceAccount", "caller"), ACCOUNT, True),
        (rbac.Subject("ServiceAccount", "caller", "other"), ACCOUNT, False),
        (
            rbac.Subject("ServiceAccount", "caller"),
            UserInfo("system:serviceaccount:team:caller2"),
            False,
        ),
        (rbac.Subject("Group", "system:serviceaccounts:team"), ACCOUNT, True),
        (rbac.Subject("User", "system:serviceaccount:team:caller"), ACCOUNT, True),
        (rbac.Subject("Group", "alice"), ALICE, False),
        (rbac.Subject("Robot", "alice"), ALICE, False),
    ],
)
def test_subjects_match_users_as_rbac_does(
    subject: rbac.Subject, user: UserInfo, applies: bool
) -> None:
    """A ServiceAccount subject takes the binding's namespace unless it names one; a Group is
    one of the user's groups; a User is the username, whatever it looks like."""
    assert subject.applies_to(user, NS) is applies


def test_a_cluster_role_binding_grants_no_unnamespaced_service_account() -> None:
    """A ServiceAccount subject without a namespace in a ClusterRoleBinding matches no one."""
    policy = rbac.Policy(
        cluster_roles={"caller": (_rule("create", "agentpool.dev", "agentpools/call"),)},
        cluster_role_bindings=(
            _binding("c", "ClusterRole", "caller", rbac.Subject("ServiceAccount", "caller")),
        ),
    )
    assert not rbac.decide(policy, _ask(ACCOUNT, "create", "agentpools/call")).allowed


def test_rules_for_lists_what_applies_and_what_is_missing() -> None:
    """The rules a user has in a namespace (``kubectl auth can-i --list``), cluster bindings first,
    and the missing roles met on the way."""
    rules, errors = rbac.rules_for(POLICY, ACCOUNT, NS)
    assert rules == (
        _rule("get", urls=("/apis", "/apis/*", "/version")),
        _rule("create", "agentpool.dev", "agentpools/call"),
        _rule("get", "agentpool.dev", "agentpools", names=("alpha",)),
    )
    assert errors == ""
    assert rbac.rules_for(POLICY, UserInfo("carol"), "other")[1] == (
        'clusterrole.rbac.authorization.k8s.io "missing" not found'
    )


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        ("GET", "/api/v1/namespaces/team/pods", {}, ("list", True, "", "team", "pods", "", "")),
        ("GET", "/api/v1/pods", {"watch": ["true"]}, ("watch", True, "", "", "pods", "", "")),
        ("GET", "/api/v1/pods", {"watch": ["0"]}, ("list", True, "", "", "pods", "", "")),
        (
            "GET",
            "/api/v1/namespaces/team/pods",
            {"fieldSelector": ["metadata.name=web"]},
            ("list", True, "", "team", "pods", "", "web"),
        ),
        (
            "GET",
            "/api/v1/namespaces/team/pods/web/log",
            {},
            ("get", True, "", "team", "pods", "log", "web"),
        ),
        ("GET", "/api/v1/namespaces/team", {}, ("get", True, "", "team", "namespaces", "", "team")),
        (
            "PUT",
            "/api/v1/namespaces/team/finalize",
            {},
            ("update", True, "", "team", "namespaces", "finalize", "team"),
        ),
        (
            "DELETE",
            "/apis/agentpool.dev/v1alpha1/namespaces/team/agentpools",
            {},
            ("deletecollection", True, "agentpool.dev", "team", "agentpools", "", ""),
        ),
        (
            "POST",
            "/api/v1/namespaces/team/serviceaccounts/caller/token",
            {},
            ("create", True, "", "team", "serviceaccounts", "token", "caller"),
        ),
        (
            "PATCH",
            "/apis/agentpool.dev/v1alpha1/namespaces/team/agentpools/p/scale",
            {},
            ("patch", True, "agentpool.dev", "team", "agentpools", "scale", "p"),
        ),
        (
            "POST",
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            {},
            ("create", True, "authorization.k8s.io", "", "selfsubjectaccessreviews", "", ""),
        ),
        (
            "GET",
            "/api/v1/watch/namespaces/team/pods",
            {},
            ("watch", True, "", "team", "pods", "", ""),
        ),
        ("GET", "/apis/agentpool.dev/v1alpha1", {}, ("get", False, "", "", "", "", "")),
        ("GET", "/apis/agentpool.dev", {}, ("get", False, "", "", "", "", "")),
        ("GET", "/api", {}, ("get", False, "", "", "", "", "")),
        ("POST", "/version", {}, ("post", False, "", "", "", "", "")),
        ("GET", "/openapi/v3/apis/agentpool.dev/v1alpha1", {}, ("get", False, "", "", "", "", "")),
    ],
)
def test_request_attributes_read_urls_as_requestinfo(
    method: str,
    path: str,
    query: dict[str, list[str]],
    expected: tuple[str, bool, str, str, str, str, str],
) -> None:
    """The verb, group, namespace, resource, subresource and name a URL asks about."""
    found = request_attributes(ALICE, method, path, query)
    assert (
        found.verb,
        found.resource_request,
        found.api_group,
        found.namespace,
        found.resource,
        found.subresource,
        found.name,
    ) == expected


@pytest.mark.parametrize(
    ("request_", "message", "details"),
    [
        (
            _ask(ACCOUNT, "list", "pods", group=""),
            f'pods is forbidden: {CALLER} cannot list resource "pods" in API group "" {IN_TEAM}',
            {"kind": "pods"},
        ),
        (
            _ask(ACCOUNT, "get", "pods/log", group="", name="web"),
            f'pods "web" is forbidden: {CALLER} cannot get resource "pods/log" in API group "" '
            f"{IN_TEAM}",
            {"name": "web", "kind": "pods"},
        ),
        (
            _ask(ACCOUNT, "create", "agentpools", namespace=""),
            f"agentpools.agentpool.dev is forbidden: {CALLER} cannot create resource "
            '"agentpools" in API group "agentpool.dev" at the cluster scope',
            {"group": "agentpool.dev", "kind": "agentpools"},
        ),
        (
            _ask(ACCOUNT, "get", path="/debug/<x>"),
            f'forbidden: {CALLER} cannot get path "/debug/&lt;x&gt;"',
            {},
        ),
    ],
)
def test_a_refusal_is_worded_as_the_real_403(
    request_: Attributes, message: str, details: dict[str, str]
) -> None:
    """The 403 Status names the user, verb, resource, group and scope as the real server does."""
    status = forbidden(request_).status()
    assert (status["code"], status["reason"], status["message"], status["details"]) == (
        403,
        "Forbidden",
        message,
        details,
    )


def _impersonating(
    requester: UserInfo, headers: list[tuple[str, str]], policy: rbac.Policy
) -> UserInfo:
    want = impersonation.wanted(headers)
    assert want is not None
    request_ = _ask(requester, "list", "pods", group="")
    return impersonation.impersonate(want, request_, lambda a: rbac.decide(policy, a))


def test_impersonating_a_service_account_adds_its_groups() -> None:
    """``--as=system:serviceaccount:NS:SA`` runs as the account in its groups and
    system:authenticated; given groups replace the account's."""
    user = _impersonating(
        MASTER, [("Impersonate-User", "system:serviceaccount:team:caller")], POLICY
    )
    assert user == UserInfo(
        "system:serviceaccount:team:caller",
        groups=("system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated"),
    )
    user = _impersonating(
        MASTER,
        [
            ("Impersonate-User", "system:serviceaccount:team:caller"),
            ("Impersonate-Group", "g1"),
            ("Impersonate-Group", "g2"),
            ("Impersonate-Uid", "u-1"),
        ],
        POLICY,
    )
    assert user == UserInfo(
        "system:serviceaccount:team:caller", "u-1", ("g1", "g2", "system:authenticated")
    )


def test_masters_may_impersonate_system_masters_through_the_legacy_verb() -> None:
    """Constrained impersonation refuses the group, and the legacy mode then allows it."""
    user = _impersonating(
        MASTER, [("Impersonate-User", "bob"), ("Impersonate-Group", "system:masters")], POLICY
    )
    assert user.groups == ("system:masters", "system:authenticated")


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        (
            [("Impersonate-User", "bob")],
            'pods is forbidden: User "alice" cannot impersonate-on:user-info:list resource "pods" '
            f'in API group "" {IN_TEAM}',
        ),
        (
            [("Impersonate-User", "system:serviceaccount:team:other")],
            'pods is forbidden: User "alice" cannot impersonate-on:serviceaccount:list resource '
            f'"pods" in API group "" {IN_TEAM}',
        ),
        (
            [("Impersonate-User", "system:serviceaccount:team:other"), ("Impersonate-Group", "g")],
            'serviceaccounts "other" is forbidden: User "alice" cannot impersonate resource '
            f'"serviceaccounts" in API group "" {IN_TEAM}',
        ),
    ],
)
def test_a_refused_impersonation_names_the_first_mode_that_applied(
    headers: list[tuple[str, str]], message: str
) -> None:
    """Without impersonation rights the 403 names the check the real v1.37 server reports."""
    with pytest.raises(ApiError) as refused:
        _impersonating(ALICE, headers, POLICY)
    assert (refused.value.code, refused.value.message) == (403, message)


def test_a_user_allowed_to_impersonate_service_accounts_may() -> None:
    """The legacy ``impersonate`` verb on ``serviceaccounts`` is enough when groups are given."""
    policy = rbac.Policy(
        cluster_roles={"sudo": (_rule("impersonate", "", "serviceaccounts groups"),)},
        cluster_role_bindings=(
            _binding("sudo", "ClusterRole", "sudo", rbac.Subject("User", "alice")),
        ),
    )
    user = _impersonating(
        ALICE,
        [("Impersonate-User", "system:serviceaccount:team:caller"), ("Impersonate-Group", "g")],
        policy,
    )
    assert user == UserInfo(
        "system:serviceaccount:team:caller", groups=("g", "system:authenticated")
    )


def test_groups_without_a_user_are_a_bad_request() -> None:
    """Impersonate-Group alone is refused with 400, in the real server's words."""
    with pytest.raises(ApiError) as refused:
        impersonation.wanted([("Impersonate-Group", "g")])
    assert refused.value.code == 400
    assert refused.value.message == (
        'requested &user.DefaultInfo{Name:"", UID:"", Groups:[]string{"g"}, '
        "Extra:map[string][]string(nil)} without impersonating a user name"
    )
