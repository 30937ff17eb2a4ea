"""The built-in resources the local API server serves before any CRD is applied.

Only the types agentpool, kopf, kubectl and the tests touch: namespaces, pods (with log and status),
events in both groups, configmaps, secrets, services, serviceaccounts, coordination leases and
CustomResourceDefinitions, plus the kinds the Helm chart renders (RBAC, Deployment,
PodDisruptionBudget, NetworkPolicy), stored as given so the chart applies as on a cluster (no
controller acts on them; the authorizer reads the RBAC kinds), and the reviews that ask the server
about tokens and access, which it answers without storing. ``ApiServer`` registers them at start.
"""

from __future__ import annotations

from agentpool.local.apiserver.resources import ResourceType, Subresource

CRD_GROUP = "apiextensions.k8s.io"
AUTHENTICATION = "authentication.k8s.io"
AUTHORIZATION = "authorization.k8s.io"
_CREATE = ("create",)

#: What callers ask the server about identities and access: created, answered, never stored.
REVIEWS: tuple[ResourceType, ...] = (
    ResourceType(
        AUTHENTICATION, "v1", "tokenreviews", "TokenReview", "tokenreview", namespaced=False,
        verbs=_CREATE, stored=False,
    ),
    ResourceType(
        AUTHENTICATION, "v1", "selfsubjectreviews", "SelfSubjectReview", "selfsubjectreview",
        namespaced=False, verbs=_CREATE, stored=False,
    ),
    ResourceType(
        AUTHORIZATION, "v1", "subjectaccessreviews", "SubjectAccessReview",
        "subjectaccessreview", namespaced=False, verbs=_CREATE, stored=False,
    ),
    ResourceType(
        AUTHORIZATION, "v1", "localsubjectaccessreviews", "LocalSubjectAccessReview",
        "localsubjectaccessreview", namespaced=True, verbs=_CREATE, stored=False,
    ),
    ResourceType(
        AUTHORIZATION, "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview",
        "selfsubjectaccessreview", namespaced=False, verbs=_CREATE, stored=False,
    ),
    ResourceType(
        AUTHORIZATION, "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview",
        "selfsubjectrulesreview", namespaced=False, verbs=_CREATE, stored=False,
    ),
)  # fmt: skip

BUILTINS: tuple[ResourceType, ...] = (
    ResourceType(
        "", "v1", "namespaces", "Namespace", "namespace", namespaced=False,
        short_names=("ns",), status=True,
        verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
    ),
    ResourceType(
        "", "v1", "pods", "Pod", "pod", namespaced=True, short_names=("po",),
        categories=("all",), status=True, extra_subresources=(Subresource("log"),),
    ),
    ResourceType("", "v1", "events", "Event", "event", namespaced=True, short_names=("ev",)),
    ResourceType(
        "", "v1", "configmaps", "ConfigMap", "configmap", namespaced=True, short_names=("cm",)
    ),
    ResourceType("", "v1", "secrets", "Secret", "secret", namespaced=True),
    ResourceType(
        "", "v1", "services", "Service", "service", namespaced=True, short_names=("svc",),
        categories=("all",), status=True,
    ),
    ResourceType(
        "", "v1", "serviceaccounts", "ServiceAccount", "serviceaccount", namespaced=True,
        short_names=("sa",),
        extra_subresources=(
            Subresource("token", ("create",), AUTHENTICATION, "v1", "TokenRequest"),
        ),
    ),
    ResourceType(
        "events.k8s.io", "v1", "events", "Event", "event", namespaced=True, short_names=("ev",)
    ),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", "lease", namespaced=True),
    ResourceType(
        "rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", "clusterrole",
        namespaced=False,
    ),
    ResourceType(
        "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding",
        "clusterrolebinding", namespaced=False,
    ),
    ResourceType(
        "rbac.authorization.k8s.io", "v1", "roles", "Role", "role", namespaced=True,
    ),
    ResourceType(
        "rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", "rolebinding",
        namespaced=True,
    ),
    ResourceType(
        "apps", "v1", "deployments", "Deployment", "deployment", namespaced=True,
        short_names=("deploy",), categories=("all",), status=True, generation=True,
    ),
    ResourceType(
        "policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", "poddisruptionbudget",
        namespaced=True, short_names=("pdb",), status=True, generation=True,
    ),
    ResourceType(
        "networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", "networkpolicy",
        namespaced=True, short_names=("netpol",), generation=True,
    ),
    *REVIEWS,
    ResourceType(
        CRD_GROUP, "v1", "customresourcedefinitions", "CustomResourceDefinition",
        "customresourcedefinition", namespaced=False, short_names=("crd", "crds"),
        categories=("api-extensions",), status=True, generation=True,
    ),
)  # fmt: skip
