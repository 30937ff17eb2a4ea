"""Defaulting and pruning: the two steps a structural schema takes before it validates an object.

A real API server prunes the fields a CRD's schema does not know (or reports them, under strict
field validation) and fills in the schema's defaults before it validates and stores an object.
"""

from __future__ import annotations

import copy
from typing import Any

from agentpool.api.base import PRESERVE
from agentpool.local.apiserver.schema.validation import join_path

_ROOT_KEPT = ("apiVersion", "kind", "metadata")


def apply_defaults(schema: dict[str, Any], obj: Any) -> Any:
    """A copy of ``obj`` with the schema's defaults filled in, as the API server stores it.

    As on a real API server, a null in a field that is not nullable is dropped first, so the
    field takes its default (or stays absent).
    """
    return _default(schema, copy.deepcopy(obj))


def _default(node: dict[str, Any], value: Any) -> Any:
    if isinstance(value, dict):
        properties: dict[str, Any] = node.get("properties", {})
        for key, child in properties.items():
            if (
                key in value
                and value[key] is None
                and "type" in child
                and not child.get("nullable")
            ):
                del value[key]
            if key not in value and "default" in child:
                value[key] = copy.deepcopy(child["default"])
            if key in value:
                value[key] = _default(child, value[key])
        additional = node.get("additionalProperties")
        if isinstance(additional, dict):
            for key in value:
                if key not in properties:
                    value[key] = _default(additional, value[key])
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        return [_default(node["items"], item) for item in value]
    return value


def prune(schema: dict[str, Any], obj: Any) -> tuple[Any, list[str]]:
    """A copy of ``obj`` without fields the schema does not know, and the paths of those fields.

    ``x-kubernetes-preserve-unknown-fields`` keeps a subtree whole; ``apiVersion``, ``kind`` and
    ``metadata`` at the root are the API server's own. The paths (``spec.foo``) are what a
    strict field validation reports as ``unknown field "spec.foo"``.
    """
    unknown: list[str] = []
    return _prune(schema, copy.deepcopy(obj), "", unknown), unknown


def _prune(node: dict[str, Any], value: Any, path: str, unknown: list[str]) -> Any:
    if node.get(PRESERVE) and "properties" not in node and "additionalProperties" not in node:
        return value
    if isinstance(value, dict):
        properties: dict[str, Any] = node.get("properties", {})
        additional = node.get("additionalProperties")
        kept: dict[str, Any] = {}
        for key, item in value.items():
            if not path and key in _ROOT_KEPT:
                kept[key] = item
            elif key in properties:
                kept[key] = _prune(properties[key], item, join_path(path, key), unknown)
            elif isinstance(additional, dict):
                kept[key] = _prune(additional, item, f"{path}[{key}]", unknown)
            elif node.get(PRESERVE) or additional is True:
                kept[key] = item
            else:
                unknown.append(join_path(path, key))
        return kept
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        items = node["items"]
        return [
            _prune(items, item, f"{path}[{index}]", unknown) for index, item in enumerate(value)
        ]
    return value
