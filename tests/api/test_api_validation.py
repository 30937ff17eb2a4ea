"""The schema validator the local API server shares: rules, transition rules, defaults, pruning.

Table-driven over small hand-written schemas, so each behaviour of a real API server that the
generated CRDs do not happen to exercise is still pinned down.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentpool.local.apiserver.schema.celrules import evaluate_rule
from agentpool.local.apiserver.schema.structural import apply_defaults, prune
from agentpool.local.apiserver.schema.validation import (
    RULES_NOT_CHECKED,
    FieldError,
    crd_schema,
    validate,
)

SIZES: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "properties": {
                "minSize": {"type": "integer", "default": 1, "minimum": 0},
                "maxSize": {"type": "integer", "nullable": True},
                "name": {"type": "string", "maxLength": 5},
                "ratio": {"type": "number", "minimum": 0, "exclusiveMinimum": True},
                "when": {"type": "string", "format": "date-time"},
                "tags": {"type": "array", "maxItems": 2, "items": {"type": "string"}},
                "conditions": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["type"],
                    "items": {
                        "type": "object",
                        "required": ["type"],
                        "properties": {"type": {"type": "string"}},
                    },
                },
                "image": {
                    "type": "string",
                    "x-kubernetes-validations": [
                        {"rule": "self == oldSelf", "message": "image is immutable"}
                    ],
                },
            },
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.maxSize) || self.minSize <= self.maxSize",
                    "messageExpression": "'maxSize ' + string(self.maxSize) + ' is below "
                    "minSize ' + string(self.minSize)",
                    "fieldPath": ".maxSize",
                },
                {"rule": "self.minSize < 100"},
            ],
        }
    },
}


#: The line a real API server adds when a schema error kept it from running the CEL rules.
NOT_CHECKED = str(RULES_NOT_CHECKED)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"minSize": 2, "maxSize": 3}, []),
        ({"minSize": 2}, []),
        (
            {"minSize": 4, "maxSize": 3},
            ["spec.maxSize: Invalid value: maxSize 3 is below minSize 4"],
        ),
        ({"minSize": 100}, ["spec: Invalid value: failed rule: self.minSize < 100"]),
        (
            {"name": "toolong"},
            ["spec.name: Too long: may not be more than 5 bytes", NOT_CHECKED],
        ),
        (
            {"ratio": 0},
            ["spec.ratio: Invalid value: 0: spec.ratio in body should be greater than 0"],
        ),
        (
            {"when": "yesterday"},
            [
                'spec.when: Invalid value: "yesterday": spec.when in body must be of type '
                'date-time: "yesterday"',
                NOT_CHECKED,
            ],
        ),
        ({"when": "2025-01-01T10:00:00Z"}, []),
        (
            {"tags": ["a", "b", "c"]},
            ["spec.tags: Too many: 3: must have at most 2 items", NOT_CHECKED],
        ),
        (
            {"conditions": [{"type": "Ready"}, {"type": "Ready"}]},
            ['spec.conditions[1]: Duplicate value: {"type": "Ready"}'],
        ),
        (
            {"conditions": [{}]},
            ["spec.conditions[0].type: Required value", NOT_CHECKED],
        ),
        (
            {"minSize": None},
            [],
        ),
    ],
)
def test_validate_reports_as_the_api_server(spec: dict[str, Any], expected: list[str]) -> None:
    """Each case yields exactly the causes a Kubernetes API server would, in its words."""
    obj = apply_defaults(SIZES, {"spec": spec})
    assert [str(error) for error in validate(SIZES, obj)] == expected


def test_transition_rules_run_only_on_update() -> None:
    """A rule over oldSelf is skipped on create and enforced on update."""
    created = apply_defaults(SIZES, {"spec": {"image": "a:1"}})
    assert validate(SIZES, created) == []
    changed = apply_defaults(SIZES, {"spec": {"image": "a:2"}})
    assert validate(SIZES, changed, old=created) == [
        FieldError("spec.image", "FieldValueInvalid", 'Invalid value: "a:2": image is immutable')
    ]
    assert validate(SIZES, created, old=created) == []


def test_a_rule_that_cannot_be_evaluated_is_reported() -> None:
    """A rule reaching for a field that is absent fails with the reason, not a crash."""
    schema = {"type": "object", "x-kubernetes-validations": [{"rule": "self.missing > 1"}]}
    [error] = validate(schema, {})
    assert error.field == ""
    assert "could not be evaluated" in error.message
    assert "missing" in error.message


def test_defaults_fill_absent_and_non_nullable_null_fields_only() -> None:
    """Defaults apply to absent fields and to nulls the schema does not allow; a nullable null
    stays; the input is not modified."""
    original: dict[str, Any] = {"spec": {"minSize": None, "maxSize": None}}
    stored = apply_defaults(SIZES, original)
    assert stored == {"spec": {"minSize": 1, "maxSize": None}}
    assert original == {"spec": {"minSize": None, "maxSize": None}}


def test_nested_defaults_apply_inside_defaulted_objects() -> None:
    """A default object gets the defaults of its own fields, as the API server fills them."""
    schema = {
        "type": "object",
        "properties": {
            "probe": {
                "type": "object",
                "default": {},
                "properties": {"path": {"type": "string", "default": "/healthz"}},
            },
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"attempts": {"type": "integer", "default": 1}},
                },
            },
        },
    }
    assert apply_defaults(schema, {"items": [{}, {"attempts": 3}]}) == {
        "probe": {"path": "/healthz"},
        "items": [{"attempts": 1}, {"attempts": 3}],
    }


def test_prune_drops_unknown_fields_and_keeps_free_json(schemas: dict[str, Any]) -> None:
    """Unknown fields are dropped and named; a template, items and input are kept whole."""
    run = {
        "apiVersion": "agentpool.dev/v1alpha1",
        "kind": "PoolRun",
        "metadata": {"name": "r", "labels": {"a": "b"}},
        "spec": {
            "poolRef": {"name": "p", "extra": 1},
            "source": {"items": [{"anything": {"deep": [1]}}]},
            "input": {"free": True},
            "colour": "blue",
        },
        "status": {"items": {"0": {"out": 1}}, "bogus": 1},
    }
    pruned, unknown = prune(schemas["PoolRun"], run)
    assert unknown == ["spec.poolRef.extra", "spec.colour", "status.bogus"]
    assert pruned["metadata"] == run["metadata"]
    assert pruned["spec"] == {
        "poolRef": {"name": "p"},
        "source": {"items": [{"anything": {"deep": [1]}}]},
        "input": {"free": True},
    }
    assert pruned["status"] == {"items": {"0": {"out": 1}}}


def test_crd_schema_picks_the_named_or_storage_version(crds: dict[str, Any]) -> None:
    """crd_schema finds the storage version by default and names a version that is missing."""
    crd = crds["agentpools.yaml"]
    assert crd_schema(crd) is crd_schema(crd, "v1alpha1")
    with pytest.raises(KeyError, match="v9"):
        crd_schema(crd, "v9")


@pytest.mark.parametrize(
    ("rule", "value", "passed"),
    [
        ("[has(self.a), has(self.b)].filter(x, x).size() == 1", {"a": 1}, True),
        ("[has(self.a), has(self.b)].filter(x, x).size() == 1", {"a": 1, "b": 2}, False),
        ("self.all(k, self[k] > 0)", {"a": 1, "b": 2}, True),
        ("self.size() <= 2", [1, 2, 3], False),
        ("self.startsWith('http')", "https://x", True),
        ("self.matches('^[a-z]+$')", "Abc", False),
    ],
)
def test_cel_evaluates_kubernetes_style_rules(rule: str, value: Any, passed: bool) -> None:
    """The CEL forms the CRDs and users' rules rely on evaluate as on an API server."""
    outcome = evaluate_rule(rule, value)
    assert (outcome.passed, outcome.error) == (passed, None)
