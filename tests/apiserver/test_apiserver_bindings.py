"""RBAC objects as the RBAC registry stores them: any path segment is a name, a binding's role
reference and subjects are checked and defaulted, and a role reference never changes.

The authorizer trusts what these checks let through, so they are the real server's, messages
included. Runs on the local server and, with ``--kubeconfig``, on a real one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from conftest import raw

RBAC = "/apis/rbac.authorization.k8s.io/v1"
GROUP = "rbac.authorization.k8s.io"


def _binding(name: str, ref: dict[str, Any], *subjects: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "roleRef": ref, "subjects": list(subjects)}


@pytest.fixture
def cluster_role(api_client: k8s.ApiClient, namespace: str) -> Iterator[str]:
    """A ClusterRole whose name has a colon, as the bootstrap roles' names do."""
    name = f"{namespace}:reader"
    made = raw(api_client, "POST", f"{RBAC}/clusterroles", body={"metadata": {"name": name}})
    assert made.status == 201, made.body
    yield name
    raw(api_client, "DELETE", f"{RBAC}/clusterroles/{name}")


def test_rbac_names_are_path_segments(api_client: k8s.ApiClient, cluster_role: str) -> None:
    """``a:b`` is a good ClusterRole name; ``/`` and ``%`` are not, each named in the 422."""
    assert ":" in cluster_role
    refused = raw(api_client, "POST", f"{RBAC}/clusterroles", body={"metadata": {"name": "a/b%c"}})
    assert refused.status == 422
    assert refused.body["message"] == (
        'ClusterRole.rbac.authorization.k8s.io "a/b%c" is invalid: [metadata.name: Invalid '
        'value: "a/b%c": may not contain \'/\', metadata.name: Invalid value: "a/b%c": may not '
        "contain '%']"
    )


def test_a_binding_defaults_its_api_groups(
    api_client: k8s.ApiClient, namespace: str, cluster_role: str
) -> None:
    """A role reference and User and Group subjects without an API group get RBAC's."""
    body = _binding(
        "read",
        {"kind": "ClusterRole", "name": cluster_role},
        {"kind": "User", "name": "alice"},
        {"kind": "Group", "name": "devs"},
        {"kind": "ServiceAccount", "name": "worker"},
    )
    made = raw(api_client, "POST", f"{RBAC}/namespaces/{namespace}/rolebindings", body=body)
    assert made.status == 201, made.body
    assert made.body["roleRef"] == {"apiGroup": GROUP, "kind": "ClusterRole", "name": cluster_role}
    assert [s.get("apiGroup") for s in made.body["subjects"]] == [GROUP, GROUP, None]


@pytest.mark.parametrize(
    ("scope", "body", "causes"),
    [
        (
            "rolebindings",
            _binding("b", {"kind": "Foo", "name": "x"}, {"kind": "User", "name": "u"}),
            [("roleRef.kind", 'Unsupported value: "Foo": supported values: "Role", "ClusterRole"')],
        ),
        (
            "rolebindings",
            {"metadata": {"name": "b"}},
            [
                ("roleRef.kind", 'Unsupported value: "": supported values: "Role", "ClusterRole"'),
                ("roleRef.name", "Required value"),
            ],
        ),
        (
            "clusterrolebindings",
            _binding("b", {"kind": "Role", "name": "x"}, {"kind": "ServiceAccount", "name": "s"}),
            [
                ("roleRef.kind", 'Unsupported value: "Role": supported values: "ClusterRole"'),
                ("subjects[0].namespace", "Required value"),
            ],
        ),
        (
            "rolebindings",
            _binding(
                "b",
                {"kind": "ClusterRole", "name": "x"},
                {"kind": "Robot", "name": "r"},
                {"kind": "ServiceAccount", "name": "s", "apiGroup": "x"},
                {"kind": "Group"},
            ),
            [
                (
                    "subjects[0].kind",
                    'Unsupported value: "Robot": supported values: "ServiceAccount", "User", '
                    '"Group"',
                ),
                ("subjects[1].apiGroup", 'Unsupported value: "x": supported values: ""'),
                ("subjects[2].name", "Required value"),
            ],
        ),
    ],
)
def test_a_bad_binding_is_refused_field_by_field(
    api_client: k8s.ApiClient,
    namespace: str,
    scope: str,
    body: dict[str, Any],
    causes: list[tuple[str, str]],
) -> None:
    """A role reference to no Role or ClusterRole, a missing name, a subject of an unknown kind
    or group: 422 with one cause per field, in the real server's words."""
    path = (
        f"{RBAC}/namespaces/{namespace}/{scope}" if scope == "rolebindings" else f"{RBAC}/{scope}"
    )
    refused = raw(api_client, "POST", path, body=body)
    assert refused.status == 422, refused.body
    assert [(c["field"], c["message"]) for c in refused.body["details"]["causes"]] == causes


def test_a_role_reference_cannot_change(
    api_client: k8s.ApiClient, namespace: str, cluster_role: str
) -> None:
    """Pointing a stored binding at another role is refused: ``roleRef`` is immutable."""
    path = f"{RBAC}/namespaces/{namespace}/rolebindings"
    made = raw(
        api_client,
        "POST",
        path,
        body=_binding("read", {"kind": "ClusterRole", "name": cluster_role}),
    )
    assert made.status == 201, made.body
    changed = {**made.body, "roleRef": {**made.body["roleRef"], "name": "other"}}
    refused = raw(api_client, "PUT", f"{path}/read", body=changed)
    assert refused.status == 422
    shown = f'{{"APIGroup":"{GROUP}","Kind":"ClusterRole","Name":"other"}}'
    assert refused.body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": f"Invalid value: {shown}: field is immutable",
            "field": "roleRef",
        }
    ]
