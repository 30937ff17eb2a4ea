"""The RBAC objects a new cluster has before anyone writes one, for the users that matter here.

kube-apiserver's bootstrap policy (``plugin/pkg/auth/authorizer/rbac/bootstrappolicy``) makes
dozens of roles; the local server makes those that decide what any authenticated user, and any
service account, may do without a grant of its own: ``cluster-admin`` for ``system:masters``,
``system:discovery`` and ``system:basic-user`` for ``system:authenticated`` (discovery, OpenAPI,
``kubectl auth can-i`` and ``whoami``), ``system:public-info-viewer`` for everyone (health and
version), and for ``system:serviceaccounts`` the issuer-discovery URLs and ClusterTrustBundles.
Each carries the bootstrapping label and the autoupdate annotation, as on a cluster.
``auth.policy`` stores them when the server starts.
"""

from __future__ import annotations

from typing import Any

from agentpool.local.apiserver.auth import users
from agentpool.local.apiserver.auth.rbac import RBAC_GROUP

Obj = dict[str, Any]

_METADATA: Obj = {
    "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
    "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
}
_DISCOVERY_URLS = ["/livez", "/readyz", "/healthz", "/version", "/version/"]


def _role(name: str, rules: list[Obj]) -> Obj:
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, **_METADATA},
        "rules": rules,
    }


def _binding(name: str, *groups: str) -> Obj:
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name, **_METADATA},
        "subjects": [{"kind": "Group", "apiGroup": RBAC_GROUP, "name": g} for g in groups],
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name},
    }


CLUSTER_ROLES: tuple[Obj, ...] = (
    _role(
        "cluster-admin",
        [
            {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]},
            {"verbs": ["*"], "nonResourceURLs": ["*"]},
        ],
    ),
    _role(
        "system:discovery",
        [
            {
                "verbs": ["get"],
                "nonResourceURLs": [
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/openapi",
                    "/openapi/*",
                    "/readyz",
                    "/version",
                    "/version/",
                ],
            }
        ],
    ),
    _role(
        "system:basic-user",
        [
            {
                "verbs": ["create"],
                "apiGroups": ["authorization.k8s.io"],
                "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
            },
            {
                "verbs": ["create"],
                "apiGroups": ["authentication.k8s.io"],
                "resources": ["selfsubjectreviews"],
            },
        ],
    ),
    _role(
        "system:public-info-viewer",
        [{"verbs": ["get"], "nonResourceURLs": sorted(_DISCOVERY_URLS)}],
    ),
    _role(
        "system:service-account-issuer-discovery",
        [
            {
                "verbs": ["get"],
                "nonResourceURLs": [
                    "/.well-known/openid-configuration",
                    "/.well-known/openid-configuration/",
                    "/openid/v1/jwks",
                    "/openid/v1/jwks/",
                ],
            }
        ],
    ),
    _role(
        "system:cluster-trust-bundle-discovery",
        [
            {
                "verbs": ["get", "list", "watch"],
                "apiGroups": ["certificates.k8s.io"],
                "resources": ["clustertrustbundles"],
            }
        ],
    ),
)

CLUSTER_ROLE_BINDINGS: tuple[Obj, ...] = (
    _binding("cluster-admin", users.MASTERS),
    _binding("system:discovery", users.AUTHENTICATED),
    _binding("system:basic-user", users.AUTHENTICATED),
    _binding("system:public-info-viewer", users.AUTHENTICATED, users.UNAUTHENTICATED),
    _binding("system:service-account-issuer-discovery", users.ALL_SERVICE_ACCOUNTS),
    _binding("system:cluster-trust-bundle-discovery", users.ALL_SERVICE_ACCOUNTS),
)
