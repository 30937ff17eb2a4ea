"""The CRDs refuse names and inline runs that would break a real cluster's limits, and say why.

An AgentPool's name becomes a label value on its pods (at most 63 characters) and a PoolRun's a
label value on its result ConfigMaps; an AgentLease's name prefixes its token Secret's; an inline
run past 10,000 items nears the object limit. The
committed schemas are checked with the validator the local API server uses; the same refusals on
a live cluster (local or ``--kube-context``) are in ``tests/local/test_local_limits.py``.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from agentpool.api import AgentPoolSpec
from agentpool.api.base import NAME_PATTERN
from agentpool.api.runs import MAX_INLINE_ITEMS
from agentpool.local.apiserver.schema.structural import apply_defaults
from agentpool.local.apiserver.schema.validation import reads_only_metadata, validate
from agentpool.pool import manifests
from agentpool.runs import results

POOL_SPEC = {"image": "agent:1"}
RUN_SPEC = {"poolRef": {"name": "p"}, "source": {"items": [1]}}
LEASE_SPEC = {"poolRef": {"name": "p"}}
SPECS = {"AgentPool": POOL_SPEC, "PoolRun": RUN_SPEC, "AgentLease": LEASE_SPEC}


def _errors(schema: dict[str, Any], name: str, spec: dict[str, Any]) -> list[str]:
    obj = apply_defaults(schema, {"metadata": {"name": name}, "spec": spec})
    return [str(error) for error in validate(schema, obj)]


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("AgentPool", "an AgentPool's name is a label value on its pods, at most 63 characters"),
        ("PoolRun", "a PoolRun's name is a label value on its result ConfigMaps, at most 63"),
    ],
)
def test_a_name_over_63_characters_is_refused_with_the_reason(
    schemas: dict[str, Any], kind: str, expected: str
) -> None:
    """A 64-character pool or run name is refused with a message that gives the limit and why;
    63 characters are accepted."""
    errors = _errors(schemas[kind], "a" * 64, SPECS[kind])
    assert len(errors) == 1
    assert expected in errors[0]
    assert _errors(schemas[kind], "a" * 63, SPECS[kind]) == []


def test_a_lease_name_leaves_room_for_its_token_secret(schemas: dict[str, Any]) -> None:
    """No label carries a lease's name, but its token Secret's name (<lease>-lease-token) starts
    with it: 241 characters are accepted, and that Secret's name is a valid object name; 242 are
    refused, saying why."""
    assert _errors(schemas["AgentLease"], "l" * 241, LEASE_SPEC) == []
    lease = {"kind": "AgentLease", "metadata": {"name": "l" * 241, "namespace": "n", "uid": "u"}}
    name = manifests.lease_token_secret(lease, "p", "token")["metadata"]["name"]
    assert len(name) <= 253
    assert re.match(NAME_PATTERN, name)
    errors = _errors(schemas["AgentLease"], "l" * 242, LEASE_SPEC)
    assert len(errors) == 1
    assert "prefixes its token Secret's (<name>-lease-token), at most 241 characters" in errors[0]


def test_too_many_inline_items_are_refused_naming_the_other_sources(
    schemas: dict[str, Any],
) -> None:
    """A run of 10,001 inline items is refused with the bound, as kube-apiserver words it
    (free JSON is out of CEL's view, so no rule can word it otherwise); the field's description,
    which kubectl explain shows, names source.configMapRef and source.http. 10,000 are
    accepted."""
    spec = {**RUN_SPEC, "source": {"items": list(range(MAX_INLINE_ITEMS + 1))}}
    errors = _errors(schemas["PoolRun"], "run", spec)
    assert errors[0] == "spec.source.items: Too many: 10001: must have at most 10000 items"
    items = schemas["PoolRun"]["properties"]["spec"]["properties"]["source"]["properties"]["items"]
    assert "configMapRef" in items["description"]
    assert "http" in items["description"]
    spec["source"]["items"].pop()
    assert _errors(schemas["PoolRun"], "run", spec) == []


def test_names_derived_from_a_63_character_pool_or_run_are_valid() -> None:
    """Labels, the token Secret, pod names and result ConfigMap names derived from the longest
    accepted names are valid label values and object names."""
    pool = "p" * 63
    obj = {"kind": "AgentPool", "metadata": {"name": pool, "namespace": "ns", "uid": "u"}}
    pod = manifests.agent_pod(obj, spec=AgentPoolSpec.model_validate(POOL_SPEC))
    secret = manifests.token_secret(obj, "token")
    for labels in (pod["metadata"]["labels"], secret["metadata"]["labels"]):
        assert all(len(value) <= 63 for value in labels.values())
    # generateName: the API server appends 5 characters (a real one first cuts the base to 58).
    names = [
        pod["metadata"]["generateName"] + "abcde",
        secret["metadata"]["name"],
        results.chunk_name("r" * 63, 10**9),
    ]
    for name in names:
        assert len(name) <= 253
        assert re.match(NAME_PATTERN, name)


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        ("self.metadata.name.size() <= 63", True),
        ("self.metadata.name == self.spec.name", False),
        ("self.spec.minSize <= 3", False),
        ("self == oldSelf", False),
    ],
)
def test_rules_reading_only_metadata_are_told_apart(rule: str, expected: bool) -> None:
    """Only a rule that reads nothing but self.metadata may be evaluated on the metadata alone
    (and so let an update leave an unchanged spec unvalidated)."""
    assert reads_only_metadata(rule) is expected
