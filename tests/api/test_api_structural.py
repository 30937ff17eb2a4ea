"""Every generated schema is structural, as the Kubernetes API server requires of a CRD.

Structural means: every node has a type (except where a free JSON value keeps unknown fields),
no $ref, no unions of types, nullable rather than a null type, no additionalProperties beside
properties, and x-kubernetes-preserve-unknown-fields only where the user's own JSON belongs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agentpool.local.apiserver.schema.celrules import compile_rule
from agentpool.local.apiserver.schema.validation import validate

TYPES = {"object", "array", "string", "integer", "number", "boolean"}
FORBIDDEN = {"$ref", "$defs", "anyOf", "allOf", "oneOf", "not", "const", "title", "definitions"}

# The only places that hold free JSON: the pod template, items, run input and outputs, and a
# lease's context.
PRESERVED = {
    "AgentPool": {"spec.template"},
    "PoolRun": {"spec.source.items[*]", "spec.input", "status.items[*]"},
    "AgentLease": {"spec.context"},
}
# Where a node may be an object without declared fields: the API server owns metadata.
OPAQUE = {"metadata"}


def walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its path (`spec.source.items[*]` for list items and map values)."""
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}" if path else name)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            yield from walk(node[key], f"{path}[*]")


KINDS = ["AgentPool", "PoolRun", "AgentLease"]


@pytest.mark.parametrize("kind", KINDS)
def test_every_node_is_typed_or_preserved_where_allowed(
    schemas: dict[str, dict[str, Any]], kind: str
) -> None:
    """Each node has a type, or is a free JSON value at one of the allowed paths."""
    preserved = set()
    for path, node in walk(schemas[kind]):
        assert not FORBIDDEN & node.keys(), f"{kind} {path}: {FORBIDDEN & node.keys()}"
        if node.get("x-kubernetes-preserve-unknown-fields"):
            preserved.add(path)
            assert node.get("type") in (None, "object"), f"{kind} {path}"
            continue
        if node.get("x-kubernetes-int-or-string"):
            # A count or a percentage (maxSurge, maxUnavailable), as a Deployment's: no type.
            assert "type" not in node, f"{kind} {path}"
            continue
        assert node.get("type") in TYPES, f"{kind} {path} has type {node.get('type')!r}"
    assert preserved == PRESERVED[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_objects_declare_their_fields(schemas: dict[str, dict[str, Any]], kind: str) -> None:
    """An object node has properties or additionalProperties (a schema), never both, never a
    bare boolean, so the API server prunes what it does not know."""
    for path, node in walk(schemas[kind]):
        if node.get("type") != "object" or node.get("x-kubernetes-preserve-unknown-fields"):
            continue
        additional = node.get("additionalProperties")
        assert additional is None or isinstance(additional, dict), f"{kind} {path}"
        if path in OPAQUE:
            continue
        assert ("properties" in node) != ("additionalProperties" in node), f"{kind} {path}"


@pytest.mark.parametrize("kind", KINDS)
def test_fields_are_described(schemas: dict[str, dict[str, Any]], kind: str) -> None:
    """Every field under spec and status carries a description (its model docstring)."""
    for path, node in walk(schemas[kind]):
        if path.startswith(("spec", "status")) and not path.endswith("[*]"):
            assert node.get("description"), f"{kind} {path} has no description"


@pytest.mark.parametrize("kind", KINDS)
def test_defaults_fit_their_own_schema(schemas: dict[str, dict[str, Any]], kind: str) -> None:
    """A default is valid where it sits, as the API server checks when the CRD is created."""
    defaults = [(path, node) for path, node in walk(schemas[kind]) if "default" in node]
    assert defaults or kind == "AgentLease"
    for path, node in defaults:
        assert validate(node, node["default"]) == [], f"{kind} {path}"


@pytest.mark.parametrize("kind", KINDS)
def test_cel_rules_compile_and_explain_themselves(
    schemas: dict[str, dict[str, Any]], kind: str
) -> None:
    """Every CEL rule compiles and carries a message that tells the user what to change."""
    for path, node in walk(schemas[kind]):
        for rule in node.get("x-kubernetes-validations", ()):
            compile_rule(rule["rule"])
            assert len(rule["message"].split()) >= 4, f"{kind} {path}: {rule}"
            guarded = node.get("type") == "object" or node.get("x-kubernetes-int-or-string")
            assert guarded, f"{kind} {path}: rules guard objects and counts-or-percentages"


@pytest.mark.parametrize("kind", KINDS)
def test_list_map_keys_are_required(schemas: dict[str, dict[str, Any]], kind: str) -> None:
    """A list keyed by a field (conditions by type, schedules by name) requires that field in
    every entry."""
    found = 0
    for path, node in walk(schemas[kind]):
        if node.get("x-kubernetes-list-type") == "map":
            found += 1
            keys = node["x-kubernetes-list-map-keys"]
            assert set(keys) <= set(node["items"].get("required", [])), f"{kind} {path}"
    assert found >= 1
