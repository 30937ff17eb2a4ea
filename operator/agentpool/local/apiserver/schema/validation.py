"""Validate JSON against a CRD's structural schema, as the API server does.

One implementation serves two callers: the local API server (``agentpool.local``) checks every
custom resource written to it, and the tests prove the generated CRDs accept the valid examples
and reject the invalid ones with messages that name the field. Errors read as a Kubernetes 1.32
API server words them (``spec.cap: Invalid value: 0: spec.cap in body should be greater than or
equal to 1``), CEL rules included. Defaulting and pruning, the steps before, are in
``structural``. Pure: data in, data out.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentpool.local.apiserver.schema.celrules import (
    evaluate_message,
    evaluate_rule,
    is_transition_rule,
)

_SELF_FIELD = re.compile(r"\bself\b(\.[A-Za-z_]\w*)?")


@dataclass(frozen=True)
class FieldError:
    """One cause of an Invalid error: the field path, the Kubernetes cause reason, the message."""

    field: str
    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


def crd_schema(crd: dict[str, Any], version: str | None = None) -> dict[str, Any]:
    """The openAPIV3Schema of ``version`` of a CRD (its storage version if not given)."""
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version or (version is None and entry.get("storage")):
            schema: dict[str, Any] = entry["schema"]["openAPIV3Schema"]
            return schema
    raise KeyError(f"{crd['metadata']['name']} has no version {version or '(storage)'}")


def validate(schema: dict[str, Any], obj: Any, *, old: Any = None) -> list[FieldError]:
    """Every way ``obj`` breaks ``schema``; ``old`` is the stored object on an update.

    Call it after ``apply_defaults``, as the API server does. Transition rules (those naming
    ``oldSelf``) run only where an old value exists.
    """
    errors = _Found()
    _validate(schema, obj, "", old, old is not None, errors)
    if _has_rules(schema) and any(error.reason in _BLOCKING for error in errors):
        # As kube-apiserver: an object with a wrong type, a missing, unsupported or oversized
        # value gets no rule's verdict (a rule over it would only fail to evaluate), and a
        # line that says so.
        return [*errors, RULES_NOT_CHECKED]
    return [*errors, *errors.rules]


#: The schema errors after which kube-apiserver runs no CEL rule (its ``hasBlockingErr``).
_BLOCKING = frozenset(
    {
        "FieldValueNotSupported",
        "FieldValueRequired",
        "FieldValueTooLong",
        "FieldValueTooMany",
        "FieldValueTypeInvalid",
    }
)


def _has_rules(node: Any) -> bool:
    """Whether a schema holds any CEL rule (a CRD without one gets no note about skipping)."""
    if isinstance(node, dict):
        return "x-kubernetes-validations" in node or any(_has_rules(v) for v in node.values())
    if isinstance(node, list):
        return any(_has_rules(v) for v in node)
    return False


class _Found(list[FieldError]):
    """Errors found: the schema's in the list itself, the CEL rules' in ``rules``."""

    def __init__(self) -> None:
        super().__init__()
        self.rules: list[FieldError] = []


#: What kube-apiserver adds when schema errors kept it from reporting the CEL rules' verdicts.
RULES_NOT_CHECKED = FieldError(
    "<nil>",
    "FieldValueInvalid",
    "Invalid value: null: some validation rules were not checked because the object was "
    "invalid; correct the existing errors to complete validation",
)


def join_path(path: str, key: str) -> str:
    """The path of ``key`` under ``path``, as API errors name a field (``spec.template``)."""
    return f"{path}.{key}" if path else key


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else type(value).__name__


def _has_type(value: Any, expected: str) -> bool:
    got = _json_type(value)
    if expected == "number":
        return got in ("integer", "number")
    if expected == "integer" and got == "number":
        return float(value).is_integer()
    return got == expected


def _show(value: Any) -> str:
    if isinstance(value, dict | list):
        return f'"{_json_type(value)}"'
    return json.dumps(value)


def _validate(
    node: dict[str, Any], value: Any, path: str, old: Any, has_old: bool, errors: _Found
) -> None:
    expected = node.get("type")
    if value is None:
        if expected and not node.get("nullable"):
            errors.append(_type_error(path, expected, value))
        return
    if expected and not _has_type(value, expected):
        errors.append(_type_error(path, expected, value))
        return
    _check_scalar(node, value, path, errors)
    if isinstance(value, dict):
        _check_object(node, value, path, old if isinstance(old, dict) else None, errors)
    elif isinstance(value, list):
        _check_array(node, value, path, errors)
    _check_rules(node, value, path, old, has_old, errors)


def _type_error(path: str, expected: str, value: Any) -> FieldError:
    got = _json_type(value)
    return FieldError(
        path,
        "FieldValueTypeInvalid",
        f'Invalid value: "{got}": {path} in body must be of type {expected}: "{got}"',
    )


def _invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(path, "FieldValueInvalid", f"Invalid value: {_show(value)}: {detail}")


def _too_many(path: str, count: int, most: int) -> FieldError:
    noun = "item" if most == 1 else "items"
    return FieldError(
        path, "FieldValueTooMany", f"Too many: {count}: must have at most {most} {noun}"
    )


def _check_scalar(node: dict[str, Any], value: Any, path: str, errors: list[FieldError]) -> None:
    if "enum" in node and not any(value == allowed for allowed in node["enum"]):
        supported = ", ".join(_show(allowed) for allowed in node["enum"])
        errors.append(
            FieldError(
                path,
                "FieldValueNotSupported",
                f"Unsupported value: {_show(value)}: supported values: {supported}",
            )
        )
    if isinstance(value, int | float) and not isinstance(value, bool):
        _check_number(node, value, path, errors)
    if isinstance(value, str):
        _check_string(node, value, path, errors)


def _check_number(node: dict[str, Any], value: float, path: str, errors: list[FieldError]) -> None:
    if "minimum" in node:
        low = node["minimum"]
        if node.get("exclusiveMinimum") and value <= low:
            errors.append(_invalid(path, value, f"{path} in body should be greater than {low}"))
        elif value < low:
            errors.append(
                _invalid(path, value, f"{path} in body should be greater than or equal to {low}")
            )
    if "maximum" in node:
        high = node["maximum"]
        if node.get("exclusiveMaximum") and value >= high:
            errors.append(_invalid(path, value, f"{path} in body should be less than {high}"))
        elif value > high:
            errors.append(
                _invalid(path, value, f"{path} in body should be less than or equal to {high}")
            )


def _check_string(node: dict[str, Any], value: str, path: str, errors: list[FieldError]) -> None:
    if "minLength" in node and len(value) < node["minLength"]:
        errors.append(
            _invalid(
                path, value, f"{path} in body should be at least {node['minLength']} chars long"
            )
        )
    if "maxLength" in node and len(value) > node["maxLength"]:
        errors.append(
            FieldError(
                path,
                "FieldValueTooLong",
                f"Too long: may not be more than {node['maxLength']} bytes",
            )
        )
    if "pattern" in node and re.search(node["pattern"], value) is None:
        errors.append(_invalid(path, value, f"{path} in body should match '{node['pattern']}'"))
    if node.get("format") == "date-time":
        try:
            datetime.fromisoformat(value)
        except ValueError:
            # A format, unlike a type, is refused showing the value itself (kube-openapi's
            # FormatOf passes the data where a type check passes its JSON type).
            shown = json.dumps(value)
            errors.append(
                FieldError(
                    path,
                    "FieldValueTypeInvalid",
                    f"Invalid value: {shown}: {path} in body must be of type date-time: {shown}",
                )
            )


def _check_object(
    node: dict[str, Any],
    value: dict[str, Any],
    path: str,
    old: dict[str, Any] | None,
    errors: _Found,
) -> None:
    for key in node.get("required", ()):
        if key not in value:
            errors.append(FieldError(join_path(path, key), "FieldValueRequired", "Required value"))
    if "minProperties" in node and len(value) < node["minProperties"]:
        detail = f"{path} in body should have at least {node['minProperties']} properties"
        errors.append(_invalid(path, len(value), detail))
    if "maxProperties" in node and len(value) > node["maxProperties"]:
        errors.append(_too_many(path, len(value), node["maxProperties"]))
    properties: dict[str, Any] = node.get("properties", {})
    for key, child in properties.items():
        if key in value:
            has_old = old is not None and key in old
            child_old = old.get(key) if old else None
            _validate(child, value[key], join_path(path, key), child_old, has_old, errors)
    additional = node.get("additionalProperties")
    if isinstance(additional, dict):
        for key, item in value.items():
            if key not in properties:
                has_old = old is not None and key in old
                item_old = old.get(key) if old else None
                _validate(additional, item, f"{path}[{key}]", item_old, has_old, errors)


def _check_array(node: dict[str, Any], value: list[Any], path: str, errors: _Found) -> None:
    if "minItems" in node and len(value) < node["minItems"]:
        detail = f"{path} in body should have at least {node['minItems']} items"
        errors.append(_invalid(path, value, detail))
    if "maxItems" in node and len(value) > node["maxItems"]:
        errors.append(_too_many(path, len(value), node["maxItems"]))
    items = node.get("items")
    if isinstance(items, dict):
        for index, item in enumerate(value):
            _validate(items, item, f"{path}[{index}]", None, False, errors)
    list_type = node.get("x-kubernetes-list-type")
    if list_type in ("map", "set"):
        keys = node.get("x-kubernetes-list-map-keys", [])
        seen: set[str] = set()
        for index, item in enumerate(value):
            identity = item
            if list_type == "map" and isinstance(item, dict):
                identity = {key: item.get(key) for key in keys}
            marker = json.dumps(identity, sort_keys=True)
            if marker in seen:
                errors.append(
                    FieldError(
                        f"{path}[{index}]", "FieldValueDuplicate", f"Duplicate value: {marker}"
                    )
                )
            seen.add(marker)


def reads_only_metadata(expression: str) -> bool:
    """Whether a root-level rule reads nothing of the object but ``self.metadata``.

    Such a rule (a name's length) need not see the spec or status, so it is evaluated on the
    metadata alone and an update that leaves them unchanged need not revalidate them.
    """
    fields = [match.group(1) for match in _SELF_FIELD.finditer(expression)]
    return bool(fields) and all(field == ".metadata" for field in fields)


def _rule_scope(expression: str, value: Any, path: str) -> Any:
    """What ``self`` must hold for ``expression``: at the root, only the metadata if the rule
    reads nothing else, so a name rule does not convert a 10,000-item spec into CEL values."""
    if not path and isinstance(value, dict) and reads_only_metadata(expression):
        return {"metadata": value.get("metadata") or {}}
    return value


def _check_rules(
    node: dict[str, Any], value: Any, path: str, old: Any, has_old: bool, errors: _Found
) -> None:
    for rule in node.get("x-kubernetes-validations", ()):
        expression = rule["rule"]
        if is_transition_rule(expression) and not has_old:
            continue
        scope = _rule_scope(expression, value, path)
        outcome = evaluate_rule(expression, scope, old=old, has_old=has_old)
        if outcome.passed:
            continue
        field = path + rule.get("fieldPath", "") if path else rule.get("fieldPath", "").lstrip(".")
        kind = node.get("type", "object")
        if outcome.error is not None:
            errors.rules.append(
                FieldError(
                    field,
                    "FieldValueInvalid",
                    f'Invalid value: "{kind}": rule {expression!r} could not be evaluated: '
                    f"{outcome.error}",
                )
            )
            continue
        message = rule.get("message", "").strip() or f"failed rule: {expression}"
        if "messageExpression" in rule:
            produced = evaluate_message(rule["messageExpression"], scope, old=old, has_old=has_old)
            message = produced.strip() if produced and produced.strip() else message
        errors.rules.append(_rule_error(field, rule.get("reason"), value, message))


def _rule_error(field: str, reason: str | None, value: Any, message: str) -> FieldError:
    if reason == "FieldValueForbidden":
        return FieldError(field, reason, f"Forbidden: {message}")
    if reason == "FieldValueRequired":
        return FieldError(field, reason, f"Required value: {message}")
    if reason == "FieldValueDuplicate":
        return FieldError(field, reason, f"Duplicate value: {_show(value)}")
    # As kube-apiserver words it: a scalar's value is shown, an object's or a list's left out.
    if isinstance(value, dict | list):
        return FieldError(field, "FieldValueInvalid", f"Invalid value: {message}")
    return FieldError(field, "FieldValueInvalid", f"Invalid value: {_show(value)}: {message}")
