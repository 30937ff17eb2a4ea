"""The valid and invalid resources in tests/data, checked against the generated CRDs.

Each resource is defaulted and validated as the API server would (schema and CEL rules). Valid
ones must pass and must also parse into the models, so the CRD and the models agree; each invalid
one names in its annotations the field and message it must be rejected with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from agentpool.api import (
    AgentLeaseSpec,
    AgentLeaseStatus,
    AgentPoolSpec,
    AgentPoolStatus,
    PoolRunSpec,
    PoolRunStatus,
)
from agentpool.local.apiserver.schema.structural import apply_defaults, prune
from agentpool.local.apiserver.schema.validation import RULES_NOT_CHECKED, validate

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
EXPECT_FIELD = "test.agentpool.dev/field"
EXPECT_MESSAGE = "test.agentpool.dev/message"

MODELS: dict[str, tuple[type[BaseModel], type[BaseModel]]] = {
    "AgentPool": (AgentPoolSpec, AgentPoolStatus),
    "PoolRun": (PoolRunSpec, PoolRunStatus),
    "AgentLease": (AgentLeaseSpec, AgentLeaseStatus),
}


def load(folder: Path) -> list[Any]:
    return [
        pytest.param(yaml.safe_load(path.read_text()), id=path.stem)
        for path in sorted(folder.glob("*.yaml"))
    ]


def examples() -> list[Any]:
    """Resources of our kinds among the manifests in examples/, whoever wrote them."""
    found = []
    for path in sorted((ROOT / "examples").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and str(doc.get("apiVersion", "")).startswith("agentpool."):
                name = doc.get("metadata", {}).get("name")
                found.append(pytest.param(doc, id=f"{path.relative_to(ROOT)}:{name}"))
    return found


def test_there_are_cases_of_every_kind() -> None:
    """The data set covers every kind, valid and invalid."""
    for folder in ("valid", "invalid"):
        kinds = {yaml.safe_load(p.read_text())["kind"] for p in (DATA / folder).glob("*.yaml")}
        assert kinds == set(MODELS), folder


@pytest.mark.parametrize("obj", load(DATA / "valid"))
def test_valid_resources_pass_and_fit_the_models(
    schemas: dict[str, dict[str, Any]], obj: dict[str, Any]
) -> None:
    """A valid resource has no errors and no unknown fields, and its defaulted spec parses into
    the model with the same values the model defaults to (schema and model defaults agree)."""
    schema = schemas[obj["kind"]]
    stored = apply_defaults(schema, obj)
    assert validate(schema, stored) == []
    assert prune(schema, obj)[1] == []
    spec_model, status_model = MODELS[obj["kind"]]
    assert spec_model.model_validate(stored["spec"]) == spec_model.model_validate(obj["spec"])
    if "status" in obj:
        assert status_model.model_validate(stored["status"]) == status_model.model_validate(
            obj["status"]
        )


@pytest.mark.parametrize("obj", load(DATA / "invalid"))
def test_invalid_resources_are_rejected_naming_the_field(
    schemas: dict[str, dict[str, Any]], obj: dict[str, Any]
) -> None:
    """An invalid resource is rejected with exactly the expected cause: its field path and a
    message in the API server's words that says what is wrong."""
    annotations = obj["metadata"]["annotations"]
    schema = schemas[obj["kind"]]
    # Past a schema error a real API server runs no CEL rule, and adds a line saying so.
    errors = [e for e in validate(schema, apply_defaults(schema, obj)) if e != RULES_NOT_CHECKED]
    assert len(errors) == 1, [str(error) for error in errors]
    matching = [
        error
        for error in errors
        if error.field == annotations[EXPECT_FIELD] and annotations[EXPECT_MESSAGE] in error.message
    ]
    assert matching, f"expected {annotations[EXPECT_FIELD]}: {annotations[EXPECT_MESSAGE]}; " + (
        "got " + "; ".join(map(str, errors))
    )
    leaf = annotations[EXPECT_FIELD].rsplit(".", 1)[-1]
    assert all(leaf in str(error) for error in matching)


@pytest.mark.parametrize("obj", examples())
def test_examples_are_valid(schemas: dict[str, dict[str, Any]], obj: dict[str, Any]) -> None:
    """Every AgentPool, PoolRun and AgentLease under examples/ passes the CRDs it ships with."""
    schema = schemas[obj["kind"]]
    assert validate(schema, apply_defaults(schema, obj)) == []
    assert prune(schema, obj)[1] == []
