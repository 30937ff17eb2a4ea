"""The typed wire views the engine writes status through name exactly the models' fields.

A status field added to a model and not to its view (or the other way round) fails here, so the
code that writes it is typed against the field the CRD gives.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from agentpool.api import (
    Condition,
    ItemFailure,
    PoolRunStatus,
    RawItemFailure,
    RawResultRef,
    RawRunStatus,
    ResultRef,
    raw_run_status,
)
from agentpool.api.conditions import ConditionView, condition_wire, stamp_condition
from agentpool.api.raw import RawCondition


def _aliases(model: type[BaseModel]) -> set[str]:
    return {field.alias or name for name, field in model.model_fields.items()}


@pytest.mark.parametrize(
    ("view", "model"),
    [
        (RawRunStatus, PoolRunStatus),
        (RawItemFailure, ItemFailure),
        (RawResultRef, ResultRef),
        (RawCondition, Condition),
    ],
)
def test_each_view_has_the_keys_of_its_model(view: Any, model: type[BaseModel]) -> None:
    assert set(view.__annotations__) == _aliases(model)


def test_a_written_status_reads_back_into_the_model() -> None:
    written: RawRunStatus = {
        "phase": "Running",
        "total": 3,
        "succeeded": 1,
        "failed": 1,
        "items": {"a": {"n": 1}},
        "failures": {"b": {"reason": "HandlerError", "message": "no", "attempts": 2}},
        "inFlight": {"c": 1},
        "resultRefs": [{"name": "r-results-0", "outputs": 4, "failures": 0}],
        "conditions": [
            stamp_condition(None, ConditionView("Waiting", "False", "Running", "-"), now="x")
        ],
    }
    written["conditions"][0]["lastTransitionTime"] = "2026-01-02T03:04:05Z"
    status = PoolRunStatus.model_validate(written)
    assert status.failures["b"].to_raw() == written["failures"]["b"]
    assert [ref.to_raw() for ref in status.result_refs] == written["resultRefs"]
    assert [condition_wire(c) for c in status.conditions] == written["conditions"]
    assert raw_run_status({"status": written}) is written
    assert raw_run_status({}) == {}
