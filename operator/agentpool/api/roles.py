"""The ClusterRoles agentpool gives a cluster for its users to bind: the caller role.

The chart renders each of them (``charts/agentpool/templates/gateway.yaml``: the ClusterRole
``<release>-caller``, ``agentpool-caller`` for the release ``agentpool``), and the local cluster
stores them as it starts (:mod:`agentpool.local.cluster`), so ``kubectl create rolebinding
--clusterrole=agentpool-caller`` works on both, as the gateway guide prints it. Their rules are
stated here once: the caller role grants ``create`` on the subresources the gateway's
SubjectAccessReview asks for (:data:`agentpool.api.gateway.SUBRESOURCES`), and the chart's tests
hold the rendered chart to :func:`user_cluster_roles`.
"""

from __future__ import annotations

from typing import Final, TypedDict

from agentpool import GROUP
from agentpool.api.gateway import FORWARDED_KINDS, PROXY, PROXY_VERBS, SUBRESOURCES, VERBS

RBAC_API_VERSION: Final = "rbac.authorization.k8s.io/v1"

#: The caller role's name: what the chart names it for the release ``agentpool``.
CALLER_ROLE: Final = "agentpool-caller"


class RawPolicyRule(TypedDict):
    """One entry of a ClusterRole's ``rules``, keys in the order kubectl prints them."""

    apiGroups: list[str]
    resources: list[str]
    verbs: list[str]


class RawRoleMeta(TypedDict):
    name: str
    labels: dict[str, str]


class RawClusterRole(TypedDict):
    """A ClusterRole as it is created."""

    apiVersion: str
    kind: str
    metadata: RawRoleMeta
    rules: list[RawPolicyRule]


def caller_rules() -> list[RawPolicyRule]:
    """Who may call or cast a pool through the gateway, and send its agents (or a lease's)
    any request: ``create`` on ``agentpools/call`` and ``agentpools/cast``, every verb a method
    maps to on ``agentpools/proxy`` and ``agentleases/proxy``, and nothing else."""
    resources = [f"agentpools/{SUBRESOURCES[verb]}" for verb in VERBS]
    proxy_verbs = sorted(set(PROXY_VERBS.values()))
    proxied = [f"{kind}/{PROXY}" for kind in FORWARDED_KINDS]
    return [
        {"apiGroups": [GROUP], "resources": resources, "verbs": ["create"]},
        {"apiGroups": [GROUP], "resources": proxied, "verbs": proxy_verbs},
    ]


def user_cluster_roles() -> list[RawClusterRole]:
    """Every ClusterRole given for users to bind, by the name the chart's release
    ``agentpool`` gives it."""
    return [
        {
            "apiVersion": RBAC_API_VERSION,
            "kind": "ClusterRole",
            "metadata": {"name": CALLER_ROLE, "labels": {"app.kubernetes.io/name": "agentpool"}},
            "rules": caller_rules(),
        }
    ]
