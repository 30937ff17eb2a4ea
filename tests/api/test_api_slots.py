"""spec.slots on an AgentPool: 1 by default, between 1 and 256, and refused beside
resetBetweenItems with a message that says how to fix it. Checked on the committed schema with
the validator the local API server uses, and on the model the operator parses."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from agentpool.api import AgentPoolSpec
from agentpool.api.pools import MAX_SLOTS
from agentpool.local.apiserver.schema.structural import apply_defaults
from agentpool.local.apiserver.schema.validation import validate


def _errors(schema: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    obj = apply_defaults(schema, {"metadata": {"name": "p"}, "spec": {"image": "a:1", **spec}})
    return [str(error) for error in validate(schema, obj)]


@pytest.mark.parametrize(
    ("spec", "refusal"),
    [
        ({}, None),
        ({"slots": 1}, None),
        ({"slots": 8}, None),
        ({"slots": MAX_SLOTS}, None),
        ({"slots": 0}, "spec.slots"),
        ({"slots": MAX_SLOTS + 1}, "spec.slots"),
        ({"slots": 1, "resetBetweenItems": True}, None),
        ({"resetBetweenItems": True}, None),
        ({"slots": 4, "resetBetweenItems": False}, None),
        ({"slots": 4, "resetBetweenItems": True}, "needs slots 1"),
    ],
)
def test_slots_bounds_and_reset_rule(
    schemas: dict[str, dict[str, Any]], spec: dict[str, Any], refusal: str | None
) -> None:
    """What the API server accepts, and that a refusal names the field or the fix."""
    errors = _errors(schemas["AgentPool"], spec)
    if refusal is None:
        assert errors == []
    else:
        assert any(refusal in error for error in errors), errors


def test_reset_refusal_says_how_to_fix_it(schemas: dict[str, dict[str, Any]]) -> None:
    """The message points at slots and offers both ways out."""
    (error,) = _errors(schemas["AgentPool"], {"slots": 2, "resetBetweenItems": True})
    assert "spec.slots" in error
    assert "set slots to 1, or turn resetBetweenItems off" in error


def test_slots_default_and_bounds_in_the_model() -> None:
    """The model the operator parses defaults to one slot and keeps the same bounds."""
    assert AgentPoolSpec().slots == 1
    assert AgentPoolSpec.model_validate({"slots": 16}).slots == 16
    for bad in (0, MAX_SLOTS + 1):
        with pytest.raises(ValidationError):
            AgentPoolSpec.model_validate({"slots": bad})


def test_slots_description_says_it_is_the_per_agent_count(
    schemas: dict[str, dict[str, Any]],
) -> None:
    """A user who reaches for concurrency reads that slots is per agent and cap per run."""
    described = schemas["AgentPool"]["properties"]["spec"]["properties"]["slots"]["description"]
    assert "containerConcurrency" in described
    assert "cap" in described
