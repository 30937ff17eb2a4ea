"""Who may do what: SubjectAccessReview, LocalSubjectAccessReview, SelfSubjectAccessReview,
impersonation and the authorization of ordinary requests, decided by RBAC as a real cluster
decides them.

Each test grants through the RBAC objects a user would write (a RoleBinding of a ClusterRole
granting ``create`` on ``agentpools/call``, a Role, a ClusterRoleBinding to a group) and asks
the server, then checks the answer a real kube-apiserver v1.37 gives for the same inputs: the
decision, the reason naming the binding, the 403 and its message, and what ``kubectl auth
can-i`` prints. Runs on the local server and, with ``--kubeconfig``, on a real one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from accounts import call, create_account, issue

from agentpool.local.cluster import crd_manifests
from agentpool.local.kubeconfig import ApiAccess
from conftest import Cluster, Kubectl, eventually

RBAC = "/apis/rbac.authorization.k8s.io/v1"
AUTHORIZATION = "/apis/authorization.k8s.io/v1"
SA_GROUPS = ("system:serviceaccounts", "system:authenticated")


@pytest.fixture(scope="module")
def access(cluster: Cluster) -> ApiAccess:
    return cluster.access


@pytest.fixture(scope="module")
def agentpool_crds(access: ApiAccess) -> None:
    """The agentpool CRDs, so ``kubectl auth can-i`` finds ``agentpools``."""
    for crd in crd_manifests():
        answer = call(
            access, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body=crd
        )
        assert answer.status in (201, 409), answer.body

    def served() -> bool:
        listed = call(access, "GET", "/apis/agentpool.dev/v1alpha1")
        return listed.status == 200 and any(
            r["name"] == "agentpools" for r in listed.body["resources"]
        )

    eventually(served, timeout=60, what="agentpools to be served")


@dataclass(frozen=True)
class Grants:
    """The RBAC objects of one test: who is bound to what, in which namespace."""

    namespace: str
    prefix: str

    def account(self, name: str) -> str:
        return f"system:serviceaccount:{self.namespace}:{name}"

    def groups(self) -> list[str]:
        return [SA_GROUPS[0], f"system:serviceaccounts:{self.namespace}", SA_GROUPS[1]]


def _create(access: ApiAccess, path: str, body: dict[str, Any]) -> None:
    answer = call(access, "POST", path, body=body)
    assert answer.status == 201, answer.body


def _cluster_role(name: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "rules": list(rules)}


def _binding(name: str, kind: str, role: str, *subjects: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
        "subjects": list(subjects),
    }


def _sar(access: ApiAccess, spec: dict[str, Any], token: str | None = None) -> Any:
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
    answer = call(access, "POST", f"{AUTHORIZATION}/subjectaccessreviews", body=body, token=token)
    assert answer.status == 201, answer.body
    return answer.body


@pytest.fixture
def grants(access: ApiAccess, namespace: str) -> Iterator[Grants]:
    """In the test's namespace: ServiceAccounts ``caller`` (bound) and ``stranger`` (not), a
    RoleBinding ``call`` of the ClusterRole granting calls, a Role ``reader`` bound to User
    ``alice``; cluster-wide, a ClusterRoleBinding of a list role to the group ``PREFIX-team``."""
    prefix = namespace
    create_account(access, namespace, "caller")
    create_account(access, namespace, "stranger")
    call_rule = {
        "verbs": ["create"],
        "apiGroups": ["agentpool.dev"],
        "resources": ["agentpools/call"],
    }
    named = {
        "verbs": ["get"],
        "apiGroups": ["agentpool.dev"],
        "resources": ["agentpools"],
        "resourceNames": ["alpha"],
    }
    _create(access, f"{RBAC}/clusterroles", _cluster_role(f"{prefix}-caller", call_rule, named))
    _create(
        access,
        f"{RBAC}/clusterroles",
        _cluster_role(
            f"{prefix}-lister",
            {"verbs": ["list"], "apiGroups": ["agentpool.dev"], "resources": ["agentpools"]},
        ),
    )
    group = {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": f"{prefix}-team"}
    _create(
        access,
        f"{RBAC}/clusterrolebindings",
        _binding(f"{prefix}-listers", "ClusterRole", f"{prefix}-lister", group),
    )
    base = f"{RBAC}/namespaces/{namespace}"
    _create(
        access,
        f"{base}/roles",
        {
            "metadata": {"name": "reader"},
            "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"]}],
        },
    )
    caller = {"kind": "ServiceAccount", "name": "caller"}
    alice = {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}
    _create(
        access, f"{base}/rolebindings", _binding("call", "ClusterRole", f"{prefix}-caller", caller)
    )
    _create(access, f"{base}/rolebindings", _binding("read", "Role", "reader", alice))
    found = Grants(namespace, prefix)
    ask = {
        "namespace": namespace,
        "verb": "create",
        "group": "agentpool.dev",
        "resource": "agentpools",
        "subresource": "call",
    }
    # A real authorizer reads RBAC from a cache that follows the store within moments.
    eventually(
        lambda: (
            _sar(access, {"user": found.account("caller"), "resourceAttributes": ask})["status"][
                "allowed"
            ]
            and _sar(
                access,
                {
                    "user": "bob",
                    "groups": [f"{prefix}-team"],
                    "resourceAttributes": {**ask, "verb": "list", "subresource": ""},
                },
            )["status"]["allowed"]
        ),
        timeout=30,
        what="the bindings to take effect",
    )
    yield found
    for path in (
        f"{RBAC}/clusterrolebindings/{prefix}-listers",
        f"{RBAC}/clusterroles/{prefix}-lister",
        f"{RBAC}/clusterroles/{prefix}-caller",
    ):
        call(access, "DELETE", path)


def _by(binding: str, role: str, subject: str) -> str:
    return f"RBAC: allowed by {binding} of {role} to {subject}"


def _rows(g: Grants) -> list[tuple[str, dict[str, Any], bool, str]]:
    """(what, spec, allowed, reason): what a SubjectAccessReview answers on a real cluster."""
    ns = g.namespace
    called = _by(
        f'RoleBinding "call/{ns}"',
        f'ClusterRole "{g.prefix}-caller"',
        f'ServiceAccount "caller/{ns}"',
    )
    listed = _by(
        f'ClusterRoleBinding "{g.prefix}-listers"',
        f'ClusterRole "{g.prefix}-lister"',
        f'Group "{g.prefix}-team"',
    )

    def pools(verb: str, sub: str = "", **more: str) -> dict[str, Any]:
        return {
            "namespace": ns,
            "verb": verb,
            "group": "agentpool.dev",
            "resource": "agentpools",
            "subresource": sub,
            **more,
        }

    caller, stranger = g.account("caller"), g.account("stranger")
    return [
        (
            "bound account calls",
            {
                "user": caller,
                "groups": g.groups(),
                "resourceAttributes": pools("create", "call", name="p"),
            },
            True,
            called,
        ),
        (
            "bound account, no groups given",
            {"user": caller, "resourceAttributes": pools("create", "call")},
            True,
            called,
        ),
        (
            "unbound account",
            {"user": stranger, "groups": g.groups(), "resourceAttributes": pools("create", "call")},
            False,
            "",
        ),
        ("wrong verb", {"user": caller, "resourceAttributes": pools("get", "call")}, False, ""),
        (
            "wrong subresource",
            {"user": caller, "resourceAttributes": pools("create", "cast")},
            False,
            "",
        ),
        ("the resource itself", {"user": caller, "resourceAttributes": pools("create")}, False, ""),
        (
            "another namespace",
            {
                "user": caller,
                "resourceAttributes": {**pools("create", "call"), "namespace": "default"},
            },
            False,
            "",
        ),
        (
            "a named pool in resourceNames",
            {"user": caller, "resourceAttributes": pools("get", name="alpha")},
            True,
            called,
        ),
        (
            "a pool not in resourceNames",
            {"user": caller, "resourceAttributes": pools("get", name="beta")},
            False,
            "",
        ),
        (
            "a group through a ClusterRoleBinding",
            {"user": "bob", "groups": [f"{g.prefix}-team"], "resourceAttributes": pools("list")},
            True,
            listed,
        ),
        (
            "the group at the cluster scope",
            {
                "user": "bob",
                "groups": [f"{g.prefix}-team"],
                "resourceAttributes": {**pools("list"), "namespace": ""},
            },
            True,
            listed,
        ),
        (
            "the group's name as a user",
            {"user": f"{g.prefix}-team", "resourceAttributes": pools("list")},
            False,
            "",
        ),
        (
            "a Role bound to a user",
            {
                "user": "alice",
                "resourceAttributes": {
                    "namespace": ns,
                    "verb": "get",
                    "resource": "configmaps",
                    "name": "x",
                },
            },
            True,
            _by(f'RoleBinding "read/{ns}"', 'Role "reader"', 'User "alice"'),
        ),
        (
            "the Role elsewhere",
            {
                "user": "alice",
                "resourceAttributes": {
                    "namespace": "default",
                    "verb": "get",
                    "resource": "configmaps",
                },
            },
            False,
            "",
        ),
        (
            "discovery for everyone authenticated",
            {
                "user": "bob",
                "groups": ["system:authenticated"],
                "nonResourceAttributes": {"path": "/apis", "verb": "get"},
            },
            True,
            _by(
                'ClusterRoleBinding "system:discovery"',
                'ClusterRole "system:discovery"',
                'Group "system:authenticated"',
            ),
        ),
        (
            "a path no one was granted",
            {
                "user": caller,
                "groups": g.groups(),
                "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
            },
            False,
            "",
        ),
        (
            "system:masters",
            {"user": "root", "groups": ["system:masters"], "resourceAttributes": pools("delete")},
            True,
            "",
        ),
    ]


def test_subject_access_reviews_decide_as_rbac(access: ApiAccess, grants: Grants) -> None:
    """Each SubjectAccessReview is allowed or not, with the reason, as on a real cluster."""
    for what, spec, allowed, reason in _rows(grants):
        status = _sar(access, spec)["status"]
        expected = {"allowed": allowed, **({"reason": reason} if reason else {})}
        assert status == expected, what


def test_local_subject_access_reviews_decide_in_their_namespace(
    access: ApiAccess, grants: Grants
) -> None:
    """A LocalSubjectAccessReview answers the namespaced rows as the cluster-wide review does,
    and refuses attributes of another namespace with the real 422."""
    ns = grants.namespace
    path = f"{AUTHORIZATION}/namespaces/{ns}/localsubjectaccessreviews"
    for what, spec, allowed, reason in _rows(grants):
        attributes = spec.get("resourceAttributes")
        if attributes is None or attributes["namespace"] != ns:
            continue
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "LocalSubjectAccessReview",
            "spec": spec,
        }
        answer = call(access, "POST", path, body=body)
        assert answer.status == 201, answer.body
        assert answer.body["metadata"]["namespace"] == ns
        assert answer.body["status"] == {
            "allowed": allowed,
            **({"reason": reason} if reason else {}),
        }, what
    elsewhere = {
        "user": "alice",
        "resourceAttributes": {"namespace": "default", "verb": "get", "resource": "pods"},
    }
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "LocalSubjectAccessReview",
        "spec": elsewhere,
    }
    refused = call(access, "POST", path, body=body)
    assert refused.status == 422
    assert refused.body["message"] == (
        '.authorization.k8s.io "" is invalid: spec.resourceAttributes.namespace: '
        'Invalid value: "default": must match metadata.namespace'
    )


def test_an_access_review_must_ask_one_thing(access: ApiAccess) -> None:
    """A review with neither resource nor non-resource attributes, or no user, is 422."""
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": "bob"},
    }
    answer = call(access, "POST", f"{AUTHORIZATION}/subjectaccessreviews", body=body)
    assert answer.status == 422
    assert answer.body["message"] == (
        '.authorization.k8s.io "" is invalid: spec: Invalid value: null: exactly one of '
        "nonResourceAttributes or resourceAttributes must be specified"
    )
    body["spec"] = {"resourceAttributes": {"verb": "get", "resource": "pods"}}
    answer = call(access, "POST", f"{AUTHORIZATION}/subjectaccessreviews", body=body)
    assert answer.status == 422
    assert answer.body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "": at least one of user or group must be specified',
            "field": "spec.user",
        }
    ]


def _ssar(
    access: ApiAccess,
    attributes: dict[str, Any],
    *,
    token: str | None = None,
    headers: tuple[tuple[str, str], ...] = (),
) -> Any:
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    }
    answer = call(
        access,
        "POST",
        f"{AUTHORIZATION}/selfsubjectaccessreviews",
        body=body,
        token=token,
        headers=headers,
    )
    assert answer.status == 201, answer.body
    return answer.body["status"]


def test_self_subject_access_reviews_ask_for_the_requester(
    access: ApiAccess, grants: Grants
) -> None:
    """A SelfSubjectAccessReview decides for whoever asks: the account by its own token, or an
    impersonated account, with the binding as the reason; the admin is allowed anything."""
    ns = grants.namespace
    ask = {
        "namespace": ns,
        "verb": "create",
        "group": "agentpool.dev",
        "resource": "agentpools",
        "subresource": "call",
    }
    reason = _by(
        f'RoleBinding "call/{ns}"',
        f'ClusterRole "{grants.prefix}-caller"',
        f'ServiceAccount "caller/{ns}"',
    )
    token = issue(access, ns, "caller")
    assert _ssar(access, ask, token=token) == {"allowed": True, "reason": reason}
    assert _ssar(access, {**ask, "subresource": "cast"}, token=token) == {"allowed": False}
    acting = (("Impersonate-User", grants.account("caller")),)
    assert _ssar(access, ask, headers=acting) == {"allowed": True, "reason": reason}
    stranger = (("Impersonate-User", grants.account("stranger")),)
    assert _ssar(access, ask, headers=stranger) == {"allowed": False}
    assert _ssar(access, ask) == {"allowed": True}


@pytest.mark.kubectl
def test_kubectl_auth_can_i_answers_as_a_cluster_does(
    kubectl: Kubectl, access: ApiAccess, grants: Grants, agentpool_crds: None
) -> None:
    """``kubectl auth can-i create agentpools --subresource=call --as=SA`` prints yes (exit 0)
    for the bound account and no (exit 1) for an unbound one and once the binding is deleted;
    ``agentpools/call`` names a pool called "call", which no one may create."""
    ns = grants.namespace

    def can_i(account: str, *what: str) -> tuple[str, int]:
        done = kubectl.run(
            "auth",
            "can-i",
            "create",
            *what,
            "-n",
            ns,
            f"--as={grants.account(account)}",
            check=False,
        )
        return done.stdout.strip(), done.returncode

    assert can_i("caller", "agentpools", "--subresource=call") == ("yes", 0)
    assert can_i("caller", "agentpools", "--subresource=cast") == ("no", 1)
    assert can_i("caller", "agentpools/call") == ("no", 1)
    assert can_i("stranger", "agentpools", "--subresource=call") == ("no", 1)
    listed = kubectl.run("auth", "can-i", "--list", "-n", ns, f"--as={grants.account('caller')}")
    assert any(
        line.split()[0] == "agentpools.agentpool.dev/call" and line.split()[-1] == "[create]"
        for line in listed.stdout.splitlines()[1:]
        if line.split()
    ), listed.stdout
    kubectl.run("delete", "rolebinding", "call", "-n", ns)
    eventually(
        lambda: can_i("caller", "agentpools", "--subresource=call") == ("no", 1),
        timeout=30,
        what="the deleted binding to stop granting",
    )


def test_an_account_may_not_do_what_it_was_not_granted(access: ApiAccess, grants: Grants) -> None:
    """An ordinary request by a service-account token that RBAC does not allow is the real 403,
    naming the user, verb, resource, group and namespace."""
    ns = grants.namespace
    token = issue(access, ns, "stranger")
    user = grants.account("stranger")
    answer = call(access, "GET", f"/api/v1/namespaces/{ns}/pods", token=token)
    assert answer.status == 403
    assert answer.body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'pods is forbidden: User "{user}" cannot list resource "pods" in API group "" '
        f'in the namespace "{ns}"',
        "reason": "Forbidden",
        "details": {"kind": "pods"},
        "code": 403,
    }
    answer = call(
        access,
        "POST",
        f"/apis/agentpool.dev/v1alpha1/namespaces/{ns}/agentpools",
        token=token,
        body={},
    )
    assert answer.status == 403
    assert answer.body["message"] == (
        f'agentpools.agentpool.dev is forbidden: User "{user}" cannot create resource '
        f'"agentpools" in API group "agentpool.dev" in the namespace "{ns}"'
    )
    assert answer.body["details"] == {"group": "agentpool.dev", "kind": "agentpools"}
    answer = call(access, "GET", "/metrics", token=token)
    assert (answer.status, answer.body["message"]) == (
        403,
        f'forbidden: User "{user}" cannot get path "/metrics"',
    )
    review = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token},
    }
    answer = call(
        access, "POST", "/apis/authentication.k8s.io/v1/tokenreviews", token=token, body=review
    )
    assert answer.status == 403


def test_an_account_may_not_impersonate(access: ApiAccess, grants: Grants) -> None:
    """Impersonation needs a grant: an account without one gets the 403 of the first
    impersonation mode that applied."""
    ns = grants.namespace
    token = issue(access, ns, "stranger")
    user = grants.account("stranger")
    answer = call(
        access,
        "GET",
        f"/api/v1/namespaces/{ns}/pods",
        token=token,
        headers=[("Impersonate-User", "bob")],
    )
    assert answer.status == 403
    assert answer.body["message"] == (
        f'pods is forbidden: User "{user}" cannot impersonate-on:user-info:list resource "pods" '
        f'in API group "" in the namespace "{ns}"'
    )


def test_impersonation_keeps_the_account_groups(access: ApiAccess, grants: Grants) -> None:
    """``--as`` a service account is that account in its groups; ``--as-group`` replaces them."""
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    path = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
    answer = call(
        access, "POST", path, body=body, headers=[("Impersonate-User", grants.account("caller"))]
    )
    assert answer.status == 201, answer.body
    assert answer.body["status"]["userInfo"] == {
        "username": grants.account("caller"),
        "groups": grants.groups(),
    }
    headers = [("Impersonate-User", grants.account("caller")), ("Impersonate-Group", "crew")]
    answer = call(access, "POST", path, body=body, headers=headers)
    assert answer.body["status"]["userInfo"]["groups"] == ["crew", "system:authenticated"]


@pytest.mark.kubectl
def test_an_account_can_use_discovery_and_is_told_what_it_may_not(
    kubectl: Kubectl, access: ApiAccess, grants: Grants, agentpool_crds: None
) -> None:
    """With only a service-account token, kubectl discovers the API (``api-resources``), knows
    who it is, and prints the server's refusal for what it may not read."""
    ns = grants.namespace
    token = issue(access, ns, "caller")
    for path in (
        "/version",
        "/api",
        "/apis",
        "/api/v1",
        "/apis/agentpool.dev/v1alpha1",
        "/openapi/v3",
    ):
        assert call(access, "GET", path, token=token).status == 200, path
    resources = kubectl.run("api-resources", "--token", token).stdout
    assert "agentpools" in resources
    whoami = json.loads(kubectl.run("auth", "whoami", "-o", "json", "--token", token).stdout)
    assert whoami["status"]["userInfo"]["username"] == grants.account("caller")
    refused = kubectl.run("get", "pods", "-n", ns, "--token", token, check=False)
    assert refused.returncode == 1
    assert (
        f'pods is forbidden: User "{grants.account("caller")}" cannot list resource "pods" in API '
        f'group "" in the namespace "{ns}"'
    ) in refused.stderr
