"""CustomResourceDefinitions: turning a stored CRD into served resource types.

When a CRD is created or updated, ``writes`` calls ``resource_types`` to register one
``ResourceType`` per served version (schema, printer columns, subresources, names, categories) and
``crd_status`` to report it Established, as the apiextensions controller does on a cluster.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agentpool.api.columns import PrinterColumn
from agentpool.api.conditions import format_time
from agentpool.local.apiserver.errors import Cause
from agentpool.local.apiserver.resources import ResourceType, ScaleSpec
from agentpool.local.apiserver.schema.celrules import undeclared_fields

Obj = dict[str, Any]


def check_crd(crd: Obj) -> list[Cause]:
    """The checks a cluster makes that a CRD author is likely to trip over."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    causes = []
    group, plural = spec.get("group", ""), names.get("plural", "")
    if not group:
        causes.append(Cause("spec.group", "Required value", "FieldValueRequired"))
    if not plural:
        causes.append(Cause("spec.names.plural", "Required value", "FieldValueRequired"))
    if not names.get("kind"):
        causes.append(Cause("spec.names.kind", "Required value", "FieldValueRequired"))
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        causes.append(
            Cause(
                "spec.scope",
                f'Unsupported value: "{spec.get("scope", "")}": '
                'supported values: "Cluster", "Namespaced"',
                "FieldValueNotSupported",
            )
        )
    if group and plural and crd["metadata"].get("name") != f"{plural}.{group}":
        causes.append(
            Cause(
                "metadata.name",
                f'Invalid value: "{crd["metadata"].get("name")}": '
                'must be spec.names.plural+"."+spec.group',
            )
        )
    versions = spec.get("versions") or []
    if not versions:
        causes.append(
            Cause(
                "spec.versions",
                "Invalid value: null: must have exactly one version marked as storage version",
            )
        )
    elif sum(1 for v in versions if v.get("storage")) != 1:
        causes.append(
            Cause(
                "spec.versions",
                "Invalid value: "
                + str([v.get("name") for v in versions])
                + ": must have exactly one version marked as storage version",
            )
        )
    for index, version in enumerate(versions):
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if schema is None:
            causes.append(
                Cause(
                    f"spec.versions[{index}].schema.openAPIV3Schema",
                    "Required value: schemas are required",
                    "FieldValueRequired",
                )
            )
        else:
            base = f"spec.versions[{index}].schema.openAPIV3Schema"
            causes.extend(_rule_fields(schema, base, root=True))
    return causes


def _rule_fields(node: Obj, path: str, *, root: bool) -> list[Cause]:
    """Rules that name a field CEL cannot see: kube-apiserver refuses them when it compiles."""
    causes = []
    for index, rule in enumerate(node.get("x-kubernetes-validations") or []):
        for name in undeclared_fields(node, str(rule.get("rule", "")), root=root):
            causes.append(
                Cause(
                    f"{path}.x-kubernetes-validations[{index}].rule",
                    f"Invalid value: {rule.get('rule')!r}: compilation failed: "
                    f"undefined field '{name}'",
                )
            )
    for key, child in (node.get("properties") or {}).items():
        causes.extend(_rule_fields(child, f"{path}.properties[{key}]", root=False))
    for key in ("items", "additionalProperties"):
        child = node.get(key)
        if isinstance(child, dict):
            causes.extend(_rule_fields(child, f"{path}.{key}", root=False))
    return causes


def _columns(version: Obj) -> tuple[PrinterColumn, ...]:
    return tuple(
        PrinterColumn(
            name=c["name"],
            type=c.get("type", "string"),
            json_path=c.get("jsonPath", ""),
            format=c.get("format", ""),
            description=c.get("description", ""),
            priority=int(c.get("priority", 0)),
        )
        for c in version.get("additionalPrinterColumns") or []
    )


def resource_types(crd: Obj) -> list[ResourceType]:
    """One resource type per served version of ``crd``."""
    spec = crd["spec"]
    names = spec["names"]
    kinds = []
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        subresources = version.get("subresources") or {}
        scale = subresources.get("scale")
        kinds.append(
            ResourceType(
                spec["group"],
                version["name"],
                names["plural"],
                names["kind"],
                names.get("singular") or names["kind"].lower(),
                namespaced=spec.get("scope") == "Namespaced",
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                status="status" in subresources,
                scale=ScaleSpec(
                    scale["specReplicasPath"],
                    scale["statusReplicasPath"],
                    scale.get("labelSelectorPath"),
                )
                if isinstance(scale, dict)
                else None,
                schema=(version.get("schema") or {}).get("openAPIV3Schema") or {},
                columns=_columns(version),
                custom=True,
                generation=True,
            )
        )
    return kinds


def crd_status(crd: Obj, now: datetime) -> Obj:
    """What the apiextensions controllers report once a CRD is served."""
    stamp = format_time(now)
    names = dict(crd["spec"]["names"])
    names.setdefault("singular", names["kind"].lower())
    names.setdefault("listKind", f"{names['kind']}List")
    conditions = [
        {
            "type": "NamesAccepted",
            "status": "True",
            "reason": "NoConflicts",
            "message": "no conflicts found",
            "lastTransitionTime": stamp,
        },
        {
            "type": "Established",
            "status": "True",
            "reason": "InitialNamesAccepted",
            "message": "the initial names have been accepted",
            "lastTransitionTime": stamp,
        },
    ]
    old = (crd.get("status") or {}).get("conditions") or []
    if old:
        conditions = [
            dict(c, lastTransitionTime=o.get("lastTransitionTime", stamp))
            for c, o in zip(conditions, old, strict=False)
        ]
    storage = [v["name"] for v in crd["spec"].get("versions") or [] if v.get("storage")]
    return {"conditions": conditions, "acceptedNames": names, "storedVersions": storage}
