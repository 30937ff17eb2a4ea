"""spec.maxSurge and spec.maxUnavailable on an AgentPool: a count or a percentage, 25% each by
default as a Deployment's, never both 0, and a refusal that says how to fix the value. Checked
on the committed schema with the validator the local API server uses, and on the model the
operator parses; percentages resolve as a Deployment resolves them."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from agentpool.api import AgentPoolSpec
from agentpool.api.base import scaled_value
from agentpool.local.apiserver.schema.structural import apply_defaults
from agentpool.local.apiserver.schema.validation import validate


def _errors(schema: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    obj = apply_defaults(schema, {"metadata": {"name": "p"}, "spec": {"image": "a:1", **spec}})
    return [str(error) for error in validate(schema, obj)]


@pytest.mark.parametrize(
    ("spec", "refusal"),
    [
        ({}, None),
        ({"maxSurge": 1, "maxUnavailable": 0}, None),
        ({"maxSurge": "0%", "maxUnavailable": "10%"}, None),
        ({"maxSurge": "100%"}, None),
        ({"maxSurge": 0, "maxUnavailable": 0}, "set maxSurge or maxUnavailable above 0"),
        ({"maxSurge": "0%", "maxUnavailable": 0}, "set maxSurge or maxUnavailable above 0"),
        ({"maxSurge": -1}, "spec.maxSurge"),
        ({"maxUnavailable": "ten"}, "spec.maxUnavailable"),
        ({"maxUnavailable": "10"}, "spec.maxUnavailable"),
    ],
)
def test_api_server_accepts_counts_and_percentages(
    schemas: dict[str, dict[str, Any]], spec: dict[str, Any], refusal: str | None
) -> None:
    """What the API server accepts, and that a refusal names the field or the fix."""
    errors = _errors(schemas["AgentPool"], spec)
    if refusal is None:
        assert errors == []
    else:
        assert any(refusal in error for error in errors), errors


def test_defaults_are_deployments() -> None:
    """A pool that says nothing rolls as a Deployment does by default."""
    spec = AgentPoolSpec()
    assert (spec.max_surge, spec.max_unavailable) == ("25%", "25%")
    assert spec.progress_deadline_seconds == 600


@pytest.mark.parametrize(
    ("field", "value", "fix"),
    [
        ("maxSurge", "abc", "percentage such as 25%"),
        ("maxUnavailable", -2, "count >= 0"),
        ("maxUnavailable", "3", "percentage such as 25%"),
    ],
)
def test_model_refuses_bad_values_with_the_fix(field: str, value: object, fix: str) -> None:
    """The operator's parse names the field and the accepted forms."""
    with pytest.raises(ValidationError) as raised:
        AgentPoolSpec.model_validate({field: value})
    assert field in str(raised.value)
    assert fix in str(raised.value)


def test_model_refuses_both_zero() -> None:
    """A rollout with no room either way is refused before it can stall."""
    with pytest.raises(ValidationError, match="set maxSurge or maxUnavailable above 0"):
        AgentPoolSpec.model_validate({"maxSurge": "0%", "maxUnavailable": 0})


@given(st.one_of(st.integers(), st.text(max_size=8)))
def test_model_accepts_exactly_counts_and_percentages(value: int | str) -> None:
    """A count >= 0 or digits-then-% parses unchanged; anything else is refused, naming the
    field."""
    valid = (isinstance(value, int) and value >= 0) or re.fullmatch(r"[0-9]+%", str(value))
    if not valid:
        with pytest.raises(ValidationError, match="maxSurge"):
            AgentPoolSpec.model_validate({"maxSurge": value, "maxUnavailable": 1})
        return
    parsed = AgentPoolSpec.model_validate({"maxSurge": value, "maxUnavailable": 1}).max_surge
    assert parsed == value
    if isinstance(parsed, int):
        assert parsed >= 0
    else:
        assert parsed.endswith("%")
        assert parsed[:-1].isdigit()


@pytest.mark.parametrize(
    ("value", "total", "up", "down"),
    [("25%", 10, 3, 2), ("25%", 4, 1, 1), ("25%", 1, 1, 0), ("0%", 7, 0, 0), (2, 10, 2, 2)],
)
def test_percentages_round_as_deployment(value: int | str, total: int, up: int, down: int) -> None:
    """maxSurge rounds up, maxUnavailable down, as a Deployment's do."""
    assert scaled_value(value, total, round_up=True) == up
    assert scaled_value(value, total, round_up=False) == down


def test_wide_listing_shows_updated_agents(crds: dict[str, dict[str, Any]]) -> None:
    """`kubectl get agentpools -o wide` has an UPDATED column reading status.updatedReplicas,
    an integer, so a rollout's progress shows beside READY."""
    [version] = crds["agentpools.yaml"]["spec"]["versions"]
    (column,) = [c for c in version["additionalPrinterColumns"] if c["name"] == "UPDATED"]
    assert column["jsonPath"] == ".status.updatedReplicas"
    assert column["type"] == "integer"
    assert column["priority"] == 1
