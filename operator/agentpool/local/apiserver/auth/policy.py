"""The stored RBAC objects as the authorizer's :class:`~.rbac.Policy`, read again only on change.

Every request by someone outside ``system:masters`` is authorized, so the roles and bindings are
parsed once and kept until one of the four RBAC resources is written (each resource's event log
tells: its end moves on every write), as kube-apiserver's authorizer reads them from informer
caches rather than from etcd. :func:`seed` stores the bootstrap roles and bindings when the
server starts. The authentication middleware and the access reviews ask :meth:`Authorizer.decide`.
"""

from __future__ import annotations

from typing import Any

from agentpool.local.apiserver.auth import bootstrap, rbac, users
from agentpool.local.apiserver.auth.attributes import Attributes
from agentpool.local.apiserver.auth.rbac import RBAC_GROUP
from agentpool.local.apiserver.registry import writes
from agentpool.local.apiserver.registry.core import Core, WriteOptions
from agentpool.local.apiserver.storage.store import Key

ROLES: Key = (RBAC_GROUP, "roles")
CLUSTER_ROLES: Key = (RBAC_GROUP, "clusterroles")
ROLE_BINDINGS: Key = (RBAC_GROUP, "rolebindings")
CLUSTER_ROLE_BINDINGS: Key = (RBAC_GROUP, "clusterrolebindings")
_KEYS = (ROLES, CLUSTER_ROLES, ROLE_BINDINGS, CLUSTER_ROLE_BINDINGS)


def seed(core: Core) -> None:
    """Store the bootstrap ClusterRoles and ClusterRoleBindings a new cluster starts with."""
    for plural, manifests in (
        ("clusterroles", bootstrap.CLUSTER_ROLES),
        ("clusterrolebindings", bootstrap.CLUSTER_ROLE_BINDINGS),
    ):
        rt = core.resolve(RBAC_GROUP, "v1", plural)
        for manifest in manifests:
            if core.store.get(rt.key, "", manifest["metadata"]["name"]) is None:
                writes.create(core, rt, "", manifest, WriteOptions())


def read_policy(core: Core) -> rbac.Policy:
    """Every stored role and binding, as values; bindings in name order."""
    store = core.store
    role_bindings: dict[str, list[rbac.Binding]] = {}
    for raw in sorted(store.items(ROLE_BINDINGS), key=_name):
        binding = rbac.Binding.parse(raw)
        role_bindings.setdefault(binding.namespace, []).append(binding)
    return rbac.Policy(
        roles={
            (r["metadata"].get("namespace", ""), r["metadata"]["name"]): rbac.rules_of(r)
            for r in store.items(ROLES)
        },
        cluster_roles={r["metadata"]["name"]: rbac.rules_of(r) for r in store.items(CLUSTER_ROLES)},
        cluster_role_bindings=tuple(
            rbac.Binding.parse(raw) for raw in sorted(store.items(CLUSTER_ROLE_BINDINGS), key=_name)
        ),
        role_bindings={ns: tuple(found) for ns, found in role_bindings.items()},
    )


def _name(raw: dict[str, Any]) -> str:
    return str(raw["metadata"]["name"])


class Authorizer:
    """The cluster's authorizer over the store's RBAC objects."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self._seen: tuple[int, ...] = ()
        self._policy = rbac.Policy()

    def policy(self) -> rbac.Policy:
        """The current policy, parsed again only when an RBAC object was written."""
        seen = tuple(self.core.store.bucket(key).log.end for key in _KEYS)
        if seen != self._seen:
            self._policy, self._seen = read_policy(self.core), seen
        return self._policy

    def decide(self, request: Attributes) -> rbac.Decision:
        if users.MASTERS in request.user.groups:
            # Decided before any role is read, so the admin's requests cost nothing here.
            return rbac.Decision(True)
        return rbac.decide(self.policy(), request)
