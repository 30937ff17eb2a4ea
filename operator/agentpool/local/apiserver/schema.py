"""Custom resource schemas: pruning, defaulting and validation (CEL rules included).

What the API server does to a custom resource before storing it, in its order: drop fields the
structural schema does not declare (reporting them for ``fieldValidation``), fill schema
defaults, then validate types, bounds, enums, patterns and ``x-kubernetes-validations`` rules,
wording each failure as the 1.32 API server does. ``writes`` calls ``prune``, ``apply_defaults``
and ``validate`` for every create and update of a custom resource.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

import celpy
from celpy.adapter import json_to_cel

from agentpool.local.apiserver.errors import Cause

Schema = dict[str, Any]

_META_FIELDS = {
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
}
ABSENT: Any = object()  # "no old value": a create, or a field the old object lacked
_JSON_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool}


def _open(schema: Schema) -> bool:
    return bool(schema.get("x-kubernetes-preserve-unknown-fields")) or bool(
        schema.get("x-kubernetes-embedded-resource")
    )


def prune(schema: Schema, obj: Any, path: str = "", *, root: bool = True) -> tuple[Any, list[str]]:
    """A copy of ``obj`` without undeclared fields, and the dotted paths that were dropped."""
    unknown: list[str] = []
    if isinstance(obj, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        result: dict[str, Any] = {}
        for key, value in obj.items():
            child = f"{path}.{key}" if path else key
            if root and key in ("apiVersion", "kind"):
                result[key] = value
            elif root and key == "metadata" and isinstance(value, dict):
                result[key] = {k: v for k, v in value.items() if k in _META_FIELDS}
                unknown.extend(f"metadata.{k}" for k in value if k not in _META_FIELDS)
            elif props is not None and key in props:
                result[key], more = prune(props[key], value, child, root=False)
                unknown.extend(more)
            elif isinstance(extra, dict):
                result[key], more = prune(extra, value, child, root=False)
                unknown.extend(more)
            elif (
                extra is True
                or _open(schema)
                or (props is None and extra is None and not root and schema.get("type") != "object")
            ):
                result[key] = value
            else:
                unknown.append(child)
        return result, unknown
    if isinstance(obj, list) and isinstance(schema.get("items"), dict):
        pruned = [
            prune(schema["items"], item, f"{path}[{i}]", root=False) for i, item in enumerate(obj)
        ]
        return [p[0] for p in pruned], [u for p in pruned for u in p[1]]
    return obj, unknown


def apply_defaults(schema: Schema, obj: Any) -> Any:
    """Fill schema defaults into a copy of ``obj``, dropping nulls in non-nullable fields first."""
    if isinstance(obj, dict):
        props = schema.get("properties") or {}
        result = dict(obj)
        for key, sub in props.items():
            if key in result and result[key] is None and not sub.get("nullable"):
                del result[key]
            if key not in result and "default" in sub:
                result[key] = json.loads(json.dumps(sub["default"]))
            if key in result:
                result[key] = apply_defaults(sub, result[key])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in list(result):
                if key not in props:
                    result[key] = apply_defaults(extra, result[key])
        return result
    if isinstance(obj, list) and isinstance(schema.get("items"), dict):
        return [apply_defaults(schema["items"], item) for item in obj]
    return obj


def _show(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(_type_name(value))


def _type_name(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if value is None:
        return "null"
    return "string"


def _type_ok(expected: str, value: Any, schema: Schema) -> bool:
    if schema.get("x-kubernetes-int-or-string"):
        return isinstance(value, int | str) and not isinstance(value, bool)
    if expected == "integer":
        integral = isinstance(value, float) and value.is_integer()
        return (isinstance(value, int) and not isinstance(value, bool)) or integral
    if expected == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    wanted = _JSON_TYPES.get(expected)
    return wanted is None or isinstance(value, wanted)


@lru_cache(maxsize=512)
def _program(rule: str) -> celpy.Runner:
    env = celpy.Environment()
    return env.program(env.compile(rule))


def _rule_causes(schema: Schema, value: Any, old: Any, path: str) -> list[Cause]:
    causes = []
    for rule in schema.get("x-kubernetes-validations") or []:
        text = rule.get("rule", "")
        if "oldSelf" in text and old is ABSENT:
            continue
        activation = {"self": json_to_cel(value)}
        if old is not ABSENT:
            activation["oldSelf"] = json_to_cel(old)
        try:
            passed = bool(_program(text).evaluate(activation))
            problem = (rule.get("message") or f"failed rule: {text}").strip()
        except Exception as error:  # a rule that cannot evaluate fails, as on a cluster
            passed, problem = False, f"{error}".strip() or f"failed rule: {text}"
        if passed:
            continue
        field = path + (rule.get("fieldPath") or "")
        reason = rule.get("reason") or "FieldValueInvalid"
        prefix = {"FieldValueForbidden": "Forbidden", "FieldValueRequired": "Required value"}
        if reason in prefix:
            message = f"{prefix[reason]}: {problem}"
        elif reason == "FieldValueDuplicate":
            message = f"Duplicate value: {json.dumps(_type_name(value))}"
        else:
            message = (
                f"Invalid value: {json.dumps(schema.get('type') or _type_name(value))}: {problem}"
            )
        causes.append(Cause(field.lstrip("."), message, reason))
    return causes


def _bounds(schema: Schema, value: Any, where: str) -> list[Cause]:
    """Numeric, length and size bounds, each worded as the API server words it."""
    shown = _show(value)
    found: list[tuple[str, str]] = []
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            found.append(("", f"should be greater than or equal to {schema['minimum']}"))
        if "maximum" in schema and value > schema["maximum"]:
            found.append(("", f"should be less than or equal to {schema['maximum']}"))
    if isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            found.append(("FieldValueTooLong", f"may not be more than {schema['maxLength']} bytes"))
        if "minLength" in schema and len(value) < schema["minLength"]:
            found.append(("", f"should be at least {schema['minLength']} chars long"))
        if "pattern" in schema and not re.search(schema["pattern"], value):
            found.append(("", f"should match '{schema['pattern']}'"))
    if isinstance(value, list | dict):
        most = schema.get("maxItems" if isinstance(value, list) else "maxProperties")
        least = schema.get("minItems" if isinstance(value, list) else "minProperties")
        if most is not None and len(value) > most:
            found.append(("FieldValueTooMany", f"must have at most {most} items"))
        if least is not None and len(value) < least:
            shown = str(len(value))
            found.append(("", f"should have at least {least} items"))
        if isinstance(value, list) and most is not None:
            shown = str(len(value))
    causes = []
    for reason, text in found:
        if reason == "FieldValueTooLong":
            causes.append(Cause(where, f"Too long: {text}", reason))
        elif reason == "FieldValueTooMany":
            causes.append(Cause(where, f"Too many: {len(value)}: {text}", reason))
        else:
            causes.append(Cause(where, f"Invalid value: {shown}: {where} in body {text}"))
    return causes


def validate(schema: Schema, value: Any, old: Any = ABSENT, path: str = "") -> list[Cause]:
    """Every way ``value`` breaks ``schema``, as field causes in the API server's words.

    On an update (``old`` given) a subtree equal to its old value is not checked again: the API
    server's validation ratcheting, which also keeps status writes from re-running spec rules.
    """
    if old is not ABSENT and value == old:
        return []
    causes: list[Cause] = []
    where = path or "<root>"
    expected = schema.get("type")
    if value is None:
        if schema.get("nullable") or expected is None:
            return []
        return [
            Cause(
                where, f'Invalid value: "null": {where} in body must be of type {expected}: "null"'
            )
        ]
    if expected and not _type_ok(expected, value, schema):
        kind = _type_name(value)
        return [
            Cause(
                where,
                f'Invalid value: "{kind}": {where} in body must be of type {expected}: "{kind}"',
            )
        ]
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(_show(v) for v in schema["enum"])
        message = f"Unsupported value: {_show(value)}: supported values: {allowed}"
        causes.append(Cause(where, message, "FieldValueNotSupported"))
    causes.extend(_bounds(schema, value, where))
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for index, item in enumerate(value):
                causes.extend(validate(items, item, ABSENT, f"{path}[{index}]"))
    if isinstance(value, dict):
        old_map: dict[str, Any] = old if isinstance(old, dict) else {}
        for key in schema.get("required") or []:
            if key not in value:
                causes.append(
                    Cause(f"{path}.{key}" if path else key, "Required value", "FieldValueRequired")
                )
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            child = f"{path}.{key}" if path else key
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None and not (path == "" and key == "metadata"):
                causes.extend(validate(sub, item, old_map.get(key, ABSENT), child))
    if not causes:
        causes.extend(_rule_causes(schema, value, old, path))
    return causes
