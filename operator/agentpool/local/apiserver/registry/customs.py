"""Custom resources on their way in: pruned, checked for unknown fields, defaulted, validated.

The schema work itself is ``schema.validation`` (shared with the CRD tests); this module
applies it the way the API server does for a write: unknown fields refused (``Strict``), warned
about (``Warn``) or silently dropped (``Ignore``), defaults filled, and on an update the top-level
fields that did not change left out of validation (ratcheting). ``writes`` calls ``custom_checks``.
"""

from __future__ import annotations

from typing import Any

from agentpool.local.apiserver.errors import Cause, bad_request, invalid
from agentpool.local.apiserver.registry.core import WriteOptions
from agentpool.local.apiserver.resources import ResourceType
from agentpool.local.apiserver.schema import structural, validation
from agentpool.local.apiserver.storage.store import Obj

META_FIELDS = {
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
    "annotations", "ownerReferences", "finalizers", "managedFields",
}  # fmt: skip


def custom_checks(
    rt: ResourceType, obj: Obj, old: Obj | None, options: WriteOptions, name: str
) -> tuple[Obj, list[str]]:
    """Prune, default and validate a custom resource; returns it and any warnings."""
    if not rt.custom or rt.schema is None:
        return obj, []
    schema, changed, unchanged = _ratchet(rt.schema, obj, old)
    pruned, unknown = structural.prune(schema, changed)
    meta = pruned.get("metadata")
    if isinstance(meta, dict):
        unknown += [f"metadata.{k}" for k in meta if k not in META_FIELDS]
        pruned["metadata"] = {k: v for k, v in meta.items() if k in META_FIELDS}
    warnings: list[str] = []
    if unknown and options.field_validation == "Strict":
        fields = ", ".join(f'unknown field "{u}"' for u in unknown)
        raise bad_request(
            f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
            f"strict decoding error: {fields}"
        )
    if unknown and options.field_validation == "Warn":
        warnings = [f'unknown field "{u}"' for u in unknown]
    defaulted = structural.apply_defaults(schema, pruned)
    errors = validation.validate(schema, defaulted, old=old)
    if errors:
        raise invalid(rt, name, [Cause(e.field, e.message, e.reason) for e in errors])
    return {**unchanged, **defaulted}, warnings


def _ratchet(schema: dict[str, Any], obj: Obj, old: Obj | None) -> tuple[dict[str, Any], Obj, Obj]:
    """Set aside top-level fields an update did not change, as validation ratcheting does.

    They were pruned, defaulted and validated when stored, so a status write neither copies nor
    re-checks the spec. Returns the schema and object without them, and them. Root-level rules
    need the whole object, so a schema with any keeps everything in, unless they read only the
    metadata (a name's length), which then always stays in.
    """
    root_rules = [rule["rule"] for rule in schema.get("x-kubernetes-validations") or ()]
    if old is None or not all(validation.reads_only_metadata(rule) for rule in root_rules):
        return schema, obj, {}
    props = schema.get("properties") or {}
    kept = {"metadata"} if root_rules else set()
    same = {k for k in props if k in obj and k in old and obj[k] == old[k] and k not in kept}
    if not same:
        return schema, obj, {}
    reduced = {
        **schema,
        "properties": {k: v for k, v in props.items() if k not in same},
        "required": [r for r in schema.get("required") or () if r not in same],
    }
    changed = {k: v for k, v in obj.items() if k not in same}
    return reduced, changed, {k: obj[k] for k in same}
