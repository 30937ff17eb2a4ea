"""What a RoleBinding or ClusterRoleBinding must say before it is stored, as the RBAC registry
checks it: the authorizer trusts these fields.

The role reference defaults its API group to ``rbac.authorization.k8s.io`` and must name a Role
or ClusterRole (a ClusterRoleBinding only a ClusterRole); it cannot change once stored. Each
subject needs a name; a User or Group defaults its API group to RBAC's and may have no other, a
ServiceAccount has none, a valid name and, in a ClusterRoleBinding, a namespace; no other kind is
a subject. The causes carry ``pkg/apis/rbac/validation``'s messages. ``kinds`` calls
:func:`binding_causes` on every create and update of either kind.
"""

from __future__ import annotations

import json
from typing import Any

from agentpool.local.apiserver.errors import Cause
from agentpool.local.apiserver.registry import names

RBAC_GROUP = "rbac.authorization.k8s.io"
BINDINGS = frozenset({(RBAC_GROUP, "rolebindings"), (RBAC_GROUP, "clusterrolebindings")})
Obj = dict[str, Any]


def _unsupported(field: str, value: object, supported: tuple[str, ...]) -> Cause:
    listed = ", ".join(json.dumps(s) for s in supported)
    message = f"Unsupported value: {json.dumps(value)}: supported values: {listed}"
    return Cause(field, message, "FieldValueNotSupported")


def _required(field: str) -> Cause:
    return Cause(field, "Required value", "FieldValueRequired")


def _role_ref(obj: Obj) -> Obj:
    ref = dict(obj.get("roleRef") or {})
    ref["apiGroup"] = ref.get("apiGroup") or RBAC_GROUP
    return ref


def binding_causes(obj: Obj, old: Obj | None, *, namespaced: bool) -> list[Cause]:
    """Default the binding's API groups in place, and say what is wrong with it."""
    ref = obj["roleRef"] = _role_ref(obj)
    causes = []
    if ref["apiGroup"] != RBAC_GROUP:
        causes.append(_unsupported("roleRef.apiGroup", ref["apiGroup"], (RBAC_GROUP,)))
    kinds = ("Role", "ClusterRole") if namespaced else ("ClusterRole",)
    if ref.get("kind", "") not in kinds:
        causes.append(_unsupported("roleRef.kind", ref.get("kind", ""), kinds))
    if not ref.get("name"):
        causes.append(_required("roleRef.name"))
    else:
        for message in names.path_segment(str(ref["name"])):
            causes.append(
                Cause("roleRef.name", f"Invalid value: {json.dumps(ref['name'])}: {message}")
            )
    subjects = []
    for index, given in enumerate(obj.get("subjects") or []):
        subject = dict(given) if isinstance(given, dict) else {}
        subjects.append(subject)
        causes.extend(_subject_causes(subject, f"subjects[{index}]", namespaced=namespaced))
    if "subjects" in obj:
        obj["subjects"] = subjects
    if old is not None and _role_ref(old) != ref:
        shown = json.dumps(
            {"APIGroup": ref["apiGroup"], "Kind": ref.get("kind", ""), "Name": ref.get("name", "")},
            separators=(",", ":"),
        )
        causes.append(Cause("roleRef", f"Invalid value: {shown}: field is immutable"))
    return causes


def _subject_causes(subject: Obj, path: str, *, namespaced: bool) -> list[Cause]:
    kind, name = subject.get("kind", ""), subject.get("name", "")
    if kind in ("User", "Group") and not subject.get("apiGroup"):
        subject["apiGroup"] = RBAC_GROUP
    causes = [] if name else [_required(f"{path}.name")]
    group = subject.get("apiGroup", "")
    if kind == "ServiceAccount":
        if name:
            for message in names.dns1123_subdomain(str(name)):
                causes.append(
                    Cause(f"{path}.name", f"Invalid value: {json.dumps(name)}: {message}")
                )
        if group:
            causes.append(_unsupported(f"{path}.apiGroup", group, ("",)))
        if not namespaced and not subject.get("namespace"):
            causes.append(_required(f"{path}.namespace"))
    elif kind in ("User", "Group"):
        if group != RBAC_GROUP:
            causes.append(_unsupported(f"{path}.apiGroup", group, (RBAC_GROUP,)))
    else:
        causes.append(_unsupported(f"{path}.kind", kind, ("ServiceAccount", "User", "Group")))
    return causes
