"""The API server's authorizer: ``system:masters`` first, then RBAC over the stored roles.

RBAC here is kube-apiserver's (``plugin/pkg/auth/authorizer/rbac``), rule for rule: a rule
grants when its verbs, API groups, resources and resource names match a resource request (a
resource ``*``, the exact ``resource/subresource``, or ``*/subresource``; ``resource/*`` matches
nothing but itself), or its verbs and non-resource URLs match a non-resource request (``*``, the
exact path, or a prefix ending in ``*``). Bindings are visited as the real resolver visits them:
every ClusterRoleBinding, then the RoleBindings of the request's namespace, each only when one
of its subjects is the user (a User by name, a Group among the user's groups, a ServiceAccount
by username, its namespace defaulting to the binding's). A RoleBinding may grant a Role of its
namespace or a ClusterRole, within that namespace. The first rule that allows decides, and the
reason names it (``RBAC: allowed by RoleBinding "rb/ns" of ClusterRole "caller" to
ServiceAccount "sa/ns"``); a binding whose role is missing is an error that a denial reports.
Aggregation is not done. :func:`decide` is the whole chain as a cluster configures it
(the privileged-group authorizer, then RBAC, with the union's ``rbac:`` prefix on a denial's
reason); :func:`rules_for` lists what a user may do in a namespace (SelfSubjectRulesReview).
Pure: :class:`Policy` holds the roles and bindings as values (``auth.policy`` reads them from the
store).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentpool.local.apiserver.auth import users
from agentpool.local.apiserver.auth.attributes import Attributes
from agentpool.local.apiserver.errors import aggregate

RBAC_GROUP = "rbac.authorization.k8s.io"


@dataclass(frozen=True)
class PolicyRule:
    """One rule of a Role or ClusterRole."""

    verbs: tuple[str, ...] = ()
    api_groups: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> PolicyRule:
        return cls(
            verbs=_strings(raw.get("verbs")),
            api_groups=_strings(raw.get("apiGroups")),
            resources=_strings(raw.get("resources")),
            resource_names=_strings(raw.get("resourceNames")),
            non_resource_urls=_strings(raw.get("nonResourceURLs")),
        )

    def allows(self, request: Attributes) -> bool:
        verb = "*" in self.verbs or request.verb in self.verbs
        if not request.resource_request:
            return verb and any(_url_matches(url, request.path) for url in self.non_resource_urls)
        return (
            verb
            and ("*" in self.api_groups or request.api_group in self.api_groups)
            and self._resource_matches(request.resource, request.subresource)
            and (not self.resource_names or request.name in self.resource_names)
        )

    def _resource_matches(self, resource: str, subresource: str) -> bool:
        combined = f"{resource}/{subresource}" if subresource else resource
        return any(
            ruled in ("*", combined) or (bool(subresource) and ruled == f"*/{subresource}")
            for ruled in self.resources
        )


@dataclass(frozen=True)
class Subject:
    kind: str
    name: str
    namespace: str = ""

    def applies_to(self, user: users.UserInfo, binding_namespace: str) -> bool:
        if self.kind == "User":
            return user.name == self.name
        if self.kind == "Group":
            return self.name in user.groups
        if self.kind == "ServiceAccount":
            namespace = self.namespace or binding_namespace
            return bool(namespace) and users.matches_service_account(
                namespace, self.name, user.name
            )
        return False

    def describe(self, binding_namespace: str) -> str:
        if self.kind == "ServiceAccount":
            return f'{self.kind} "{self.name}/{self.namespace or binding_namespace}"'
        return f'{self.kind} "{self.name}"'


@dataclass(frozen=True)
class Binding:
    """A RoleBinding (``namespace`` set) or a ClusterRoleBinding."""

    name: str
    role_kind: str
    role_name: str
    subjects: tuple[Subject, ...]
    namespace: str = ""

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Binding:
        meta, ref = raw.get("metadata") or {}, raw.get("roleRef") or {}
        return cls(
            name=str(meta.get("name", "")),
            namespace=str(meta.get("namespace", "")),
            role_kind=str(ref.get("kind", "")),
            role_name=str(ref.get("name", "")),
            subjects=tuple(
                Subject(str(s.get("kind", "")), str(s.get("name", "")), str(s.get("namespace", "")))
                for s in raw.get("subjects") or ()
                if isinstance(s, dict)
            ),
        )

    def describe(self, subject: Subject) -> str:
        if self.namespace:
            title = f'RoleBinding "{self.name}/{self.namespace}"'
        else:
            title = f'ClusterRoleBinding "{self.name}"'
        role = f'{self.role_kind} "{self.role_name}"'
        return f"{title} of {role} to {subject.describe(self.namespace)}"


@dataclass(frozen=True)
class Policy:
    """Every Role, ClusterRole, RoleBinding and ClusterRoleBinding, as values."""

    roles: Mapping[tuple[str, str], tuple[PolicyRule, ...]] = field(default_factory=dict)
    cluster_roles: Mapping[str, tuple[PolicyRule, ...]] = field(default_factory=dict)
    cluster_role_bindings: tuple[Binding, ...] = ()
    role_bindings: Mapping[str, tuple[Binding, ...]] = field(default_factory=dict)

    def role_rules(self, binding: Binding) -> tuple[PolicyRule, ...] | str:
        """The rules a binding grants, or the error a missing role is."""
        if binding.role_kind == "Role":
            rules = self.roles.get((binding.namespace, binding.role_name))
            found = "role"
        elif binding.role_kind == "ClusterRole":
            rules = self.cluster_roles.get(binding.role_name)
            found = "clusterrole"
        else:
            return f'unsupported role reference kind: "{binding.role_kind}"'
        if rules is None:
            return f'{found}.{RBAC_GROUP} "{binding.role_name}" not found'
        return rules


@dataclass(frozen=True)
class Decision:
    """An authorizer's answer: allowed or not, and the reason it gives."""

    allowed: bool
    reason: str = ""


def rules_of(raw: Mapping[str, Any]) -> tuple[PolicyRule, ...]:
    return tuple(PolicyRule.parse(r) for r in raw.get("rules") or () if isinstance(r, dict))


def _visit(
    policy: Policy, user: users.UserInfo, namespace: str
) -> Iterator[tuple[Binding, Subject, PolicyRule] | str]:
    """Each rule that applies to the user in the namespace with the binding that grants it, and
    each error met on the way, in the order the real resolver visits them."""
    bindings: Sequence[Binding] = policy.cluster_role_bindings
    if namespace:
        bindings = [*bindings, *policy.role_bindings.get(namespace, ())]
    for binding in bindings:
        subject = next((s for s in binding.subjects if s.applies_to(user, binding.namespace)), None)
        if subject is None:
            continue
        rules = policy.role_rules(binding)
        if isinstance(rules, str):
            yield rules
            continue
        for rule in rules:
            yield binding, subject, rule


def authorize(policy: Policy, request: Attributes) -> Decision:
    """RBAC's decision alone: allowed with the granting binding, or no opinion."""
    errors = []
    for visited in _visit(policy, request.user, request.namespace):
        if isinstance(visited, str):
            errors.append(visited)
            continue
        binding, subject, rule = visited
        if rule.allows(request):
            return Decision(True, f"RBAC: allowed by {binding.describe(subject)}")
    return Decision(False, f"RBAC: {aggregate(errors)}" if errors else "")


def decide(policy: Policy, request: Attributes) -> Decision:
    """The cluster's decision: ``system:masters`` may do anything; anyone else what RBAC grants
    (a denial's reason carries the name of the authorizer that gave it, as the union words it)."""
    if users.MASTERS in request.user.groups:
        return Decision(True)
    decision = authorize(policy, request)
    if decision.allowed or not decision.reason:
        return decision
    return Decision(False, f"rbac: {decision.reason}")


def rules_for(
    policy: Policy, user: users.UserInfo, namespace: str
) -> tuple[tuple[PolicyRule, ...], str]:
    """Every rule that applies to the user in the namespace, and the errors met, aggregated."""
    rules, errors = [], []
    for visited in _visit(policy, user, namespace):
        if isinstance(visited, str):
            errors.append(visited)
        else:
            rules.append(visited[2])
    return tuple(rules), aggregate(errors)


def _url_matches(ruled: str, path: str) -> bool:
    if ruled in ("*", path):
        return True
    return ruled.endswith("*") and path.startswith(ruled.rstrip("*"))


def _strings(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(str(v) for v in value)
