"""Turn a pydantic model's JSON Schema into a structural OpenAPI v3 schema for a CRD.

The Kubernetes API server accepts only structural schemas: every node typed, no ``$ref``, no
``anyOf`` over types, ``nullable`` instead of a null type, OpenAPI 3.0's boolean
``exclusiveMinimum``. pydantic writes JSON Schema 2020-12, so ``structural_schema`` rewrites it
node by node and puts each node's keys in one fixed order, so the generated CRDs are
byte-for-byte stable. Called by ``agentpool.api.crds``.
"""

from __future__ import annotations

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaValue

from agentpool.api.base import PRESERVE

# The order keys take in every schema node, so output never depends on pydantic's internals.
KEY_ORDER = (
    "description",
    "type",
    "format",
    "enum",
    "default",
    "nullable",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "required",
    "properties",
    "additionalProperties",
    "items",
    PRESERVE,
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-validations",
)
_RANK = {key: index for index, key in enumerate(KEY_ORDER)}
RULE_ORDER = ("rule", "message", "messageExpression", "fieldPath", "reason", "optionalOldSelf")

# JSON Schema keys that a structural schema may not carry, or that say nothing to the API server.
_DROPPED = {"title", "$defs", "examples"}


class NotStructural(ValueError):
    """A model uses a construct the API server cannot express (a union of types, say)."""


def structural_schema(model: type[BaseModel]) -> JsonSchemaValue:
    """The structural schema of ``model`` as it appears on the wire (camelCase names)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs: JsonSchemaValue = raw.get("$defs", {})
    return _clean(raw, defs, model.__name__)


def _resolve(node: JsonSchemaValue, defs: JsonSchemaValue, where: str) -> JsonSchemaValue:
    """Inline ``$ref`` and single-element ``allOf``; the referring node's keys win."""
    if "$ref" in node:
        name = str(node["$ref"]).rsplit("/", 1)[-1]
        siblings = {key: value for key, value in node.items() if key != "$ref"}
        return _resolve({**defs[name], **siblings}, defs, where)
    if "allOf" in node and len(node["allOf"]) == 1:
        siblings = {key: value for key, value in node.items() if key != "allOf"}
        return _resolve({**node["allOf"][0], **siblings}, defs, where)
    if "anyOf" in node:
        variants = node["anyOf"]
        typed = [variant for variant in variants if variant != {"type": "null"}]
        if len(typed) != 1:
            raise NotStructural(f"{where}: a union of types has no structural schema")
        siblings = {key: value for key, value in node.items() if key != "anyOf"}
        merged = {**_resolve(typed[0], defs, where), **siblings}
        if len(typed) < len(variants):
            merged["nullable"] = True
        return merged
    return node


def _clean(node: JsonSchemaValue, defs: JsonSchemaValue, where: str) -> JsonSchemaValue:
    node = _resolve(node, defs, where)
    out: JsonSchemaValue = {}
    for key, value in node.items():
        if key in _DROPPED:
            continue
        if key == "description":
            out[key] = " ".join(str(value).split())
        elif key == "default" and value is None:
            continue
        elif key == "const":
            out["enum"] = [value]
        elif key == "exclusiveMinimum" and not isinstance(value, bool):
            out["minimum"] = value
            out["exclusiveMinimum"] = True
        elif key == "exclusiveMaximum" and not isinstance(value, bool):
            out["maximum"] = value
            out["exclusiveMaximum"] = True
        elif key == "properties":
            out[key] = {
                name: _clean(child, defs, f"{where}.{name}") for name, child in value.items()
            }
        elif key == "additionalProperties":
            if isinstance(value, dict):
                out[key] = _clean(value, defs, f"{where}[*]")
            elif value is True:
                out[PRESERVE] = True
        elif key == "items":
            out[key] = _clean(value, defs, f"{where}[*]")
        elif key == "x-kubernetes-validations":
            out[key] = [{name: rule[name] for name in RULE_ORDER if name in rule} for rule in value]
        else:
            out[key] = value
    if out.get("type") == "object" and out.get(PRESERVE) and "additionalProperties" in out:
        del out["additionalProperties"]
    return order_keys(out)


def order_keys(node: JsonSchemaValue) -> JsonSchemaValue:
    """``node`` with its keys in ``KEY_ORDER``, unknown keys after them in alphabetical order."""
    return dict(sorted(node.items(), key=lambda item: (_RANK.get(item[0], len(_RANK)), item[0])))
