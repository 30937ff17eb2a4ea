"""Every printer column of the generated CRDs finds a value of its type in a real object.

The example objects are built from the models (so a renamed field breaks this test, not a user's
`kubectl get`), then each column's JSONPath is resolved the way the API server fills a Table.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from columnpaths import first, resolve

from agentpool.api import (
    AgentLease,
    AgentLeaseSpec,
    AgentLeaseStatus,
    AgentPool,
    AgentPoolSpec,
    AgentPoolStatus,
    Condition,
    NameRef,
    ObjectMeta,
    PoolRun,
    PoolRunSpec,
    PoolRunStatus,
    Source,
)
from agentpool.api.crds import Column, printer_column

CREATED = datetime(2025, 1, 1, 10, 0, tzinfo=UTC)


def meta(name: str) -> ObjectMeta:
    return ObjectMeta(name=name, namespace="default", creation_timestamp=CREATED)


EXAMPLES: dict[str, dict[str, Any]] = {
    "AgentPool": AgentPool(
        metadata=meta("echo"),
        spec=AgentPoolSpec(image="echo:1", min_size=2, max_size=4),
        status=AgentPoolStatus(
            replicas=3,
            ready_replicas=3,
            available=1,
            busy=2,
            overflow=1,
            max_size=4,
            state="Overflow",
            effective_min_size=3,
            effective_min_idle=1,
            open_schedules="business-hours",
        ),
    ).to_wire(),
    "PoolRun": PoolRun(
        metadata=meta("run"),
        spec=PoolRunSpec(pool_ref=NameRef(name="echo"), source=Source(items=[1, 2, 3])),
        status=PoolRunStatus(
            phase="Failed",
            result="Drained",
            message="1 of 3 items failed",
            total=3,
            active=0,
            succeeded=2,
            failed=1,
            retries=1,
        ),
    ).to_wire(),
    "AgentLease": AgentLease(
        metadata=meta("chat"),
        spec=AgentLeaseSpec(pool_ref=NameRef(name="echo")),
        status=AgentLeaseStatus(
            phase="Bound", agent="echo-abc12", endpoint="http://127.0.0.5:8080"
        ),
    ).to_wire(),
}

CELL_TYPES: dict[str, type | tuple[type, ...]] = {
    "integer": int,
    "number": (int, float),
    "string": str,
    "boolean": bool,
    "date": str,
}


def columns(crds: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (crd["spec"]["names"]["kind"], column)
        for crd in crds.values()
        for column in crd["spec"]["versions"][0]["additionalPrinterColumns"]
    ]


def test_every_column_resolves_to_a_value_of_its_type(crds: dict[str, dict[str, Any]]) -> None:
    """Each column's JSONPath finds a value in the example object, of the column's type."""
    found = columns(crds)
    assert len(found) >= 20
    for kind, column in found:
        value = first(EXAMPLES[kind], column["jsonPath"])
        assert value is not None, f"{kind} column {column['name']} ({column['jsonPath']}) is empty"
        assert isinstance(value, CELL_TYPES[column["type"]]), f"{kind} {column['name']}: {value!r}"
        if column["type"] == "date":
            datetime.fromisoformat(str(value))


def test_columns_show_the_expected_cells(crds: dict[str, dict[str, Any]]) -> None:
    """The default columns read the fields the resources define: DONE is the succeeded count."""
    cells = {
        (kind, column["name"]): first(EXAMPLES[kind], column["jsonPath"])
        for kind, column in columns(crds)
    }
    assert cells[("AgentPool", "MIN")] == 2
    assert cells[("AgentPool", "MAX")] == 4
    assert cells[("AgentPool", "READY")] == 3
    assert cells[("AgentPool", "BUSY")] == 2
    assert cells[("AgentPool", "STATE")] == "Overflow"
    assert cells[("PoolRun", "POOL")] == "echo"
    assert cells[("PoolRun", "DONE")] == 2
    assert cells[("PoolRun", "FAILED")] == 1
    assert cells[("PoolRun", "TOTAL")] == 3
    assert cells[("PoolRun", "RESULT")] == "Drained"
    assert cells[("AgentLease", "AGENT")] == "echo-abc12"
    assert cells[("AgentLease", "TTL")] == 300


def test_every_column_path_exists_in_the_schema(
    crds: dict[str, dict[str, Any]], schemas: dict[str, dict[str, Any]]
) -> None:
    """Each column points at a declared field, so an empty cell means "not set", not a typo."""
    for kind, column in columns(crds):
        if column["jsonPath"].startswith(".metadata."):
            continue
        node = schemas[kind]
        for name in column["jsonPath"].strip(".").split("."):
            assert name in node.get("properties", {}), f"{kind} {column['jsonPath']}"
            node = node["properties"][name]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (".status.conditions[0].type", ["Ready"]),
        (".status.conditions[-1].status", ["False"]),
        ('.status.conditions[?(@.type=="Degraded")].reason', ["ImagePullBackOff"]),
        (".status.conditions[*].type", ["Ready", "Degraded"]),
        ("{.metadata['name']}", ["echo"]),
        (".status.missing", []),
        (".spec.image.deeper", []),
    ],
)
def test_jsonpath_forms(path: str, expected: list[Any]) -> None:
    """The JSONPath forms printer columns use resolve as kubectl's would."""
    obj = AgentPool(
        metadata=meta("echo"),
        spec=AgentPoolSpec(image="echo:1"),
        status=AgentPoolStatus(
            conditions=[
                Condition(type="Ready", status="True"),
                Condition(type="Degraded", status="False", reason="ImagePullBackOff"),
            ]
        ),
    ).to_wire()
    assert resolve(obj, path) == expected


def test_every_column_has_the_type_of_the_field_it_shows(
    crds: dict[str, dict[str, Any]], schemas: dict[str, dict[str, Any]]
) -> None:
    """A column's type is that of the field its path reads, as the schema declares it (a
    date-time string is a date), so kubectl formats and sorts the cell as the field is."""
    for kind, column in columns(crds):
        if column["jsonPath"].startswith(".metadata."):
            continue
        node = schemas[kind]
        for name in column["jsonPath"].strip(".").split("."):
            node = node["properties"][name]
        declared = "date" if node.get("format") == "date-time" else node["type"]
        assert column["type"] == declared, f"{kind} {column['name']} ({column['jsonPath']})"


def test_every_column_is_described_in_one_short_line(crds: dict[str, dict[str, Any]]) -> None:
    """A column's description is its field's first sentence, trimmed to one line a reader takes
    in at a glance."""
    for kind, column in columns(crds):
        description = column["description"]
        assert description, f"{kind} {column['name']} has no description"
        assert len(description) <= 100, f"{kind} {column['name']}: {description!r}"
        assert "\n" not in description
        assert "(" not in description
        assert not description.endswith(".")


def test_a_column_on_a_field_the_model_lacks_is_refused() -> None:
    """A column whose field was renamed fails CRD generation, naming the model and the field,
    rather than showing an empty cell in every `kubectl get`."""
    with pytest.raises(ValueError, match="AgentPoolStatus has no field readyAgents"):
        printer_column(
            Column("READY", ".status.readyAgents"), spec=AgentPoolSpec, status=AgentPoolStatus
        )
    with pytest.raises(ValueError, match="not a spec or status field"):
        printer_column(Column("NAME", ".metadata.name"), spec=AgentPoolSpec, status=AgentPoolStatus)
