"""The API models as the operator uses them: defaults, wire names, conveniences, clear errors."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import StrEnum

import pytest

from agentpool.api import (
    AgentPool,
    AgentPoolSpec,
    Condition,
    PoolRunSpec,
    PoolRunStatus,
    SpecError,
    parse_spec,
    reasons,
)


def test_pool_defaults_are_design_defaults() -> None:
    """An AgentPool with only an image takes the documented defaults."""
    spec = AgentPoolSpec(image="echo:1")
    assert (spec.port, spec.min_size, spec.max_size, spec.strategy) == (8080, 1, None, "LIFO")
    assert (spec.idle_timeout_seconds, spec.max_uses, spec.max_lifetime_seconds) == (60, 0, 0)
    assert (spec.min_idle, spec.checkout_timeout_seconds, spec.call_timeout_seconds) == (0, 30, 300)
    assert (spec.reset_between_items, spec.quarantine_after_failures) == (False, 3)


@pytest.mark.parametrize(("min_size", "max_size", "ceiling"), [(2, None, 2), (2, 5, 5), (0, 0, 0)])
def test_max_size_defaults_to_min_size(min_size: int, max_size: int | None, ceiling: int) -> None:
    """maxSize unset means no overflow: the ceiling is minSize."""
    assert AgentPoolSpec(min_size=min_size, max_size=max_size).effective_max_size == ceiling


def test_readiness_probe_defaults_to_healthz_on_the_pool_port() -> None:
    """Without a probe, or with one that names no handler, agents are probed at GET /healthz."""
    probe = AgentPoolSpec(image="a", port=9000).effective_readiness_probe()
    assert probe.to_wire() == {"httpGet": {"path": "/healthz", "port": 9000, "scheme": "HTTP"}}
    tuned = parse_spec(AgentPoolSpec, {"image": "a", "readinessProbe": {"periodSeconds": 2}})
    assert tuned.effective_readiness_probe().to_wire() == {
        "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
        "periodSeconds": 2,
    }
    tcp = parse_spec(AgentPoolSpec, {"image": "a", "readinessProbe": {"tcpSocket": {}}})
    assert tcp.effective_readiness_probe().http_get is None


def test_wire_names_are_camel_case_both_ways() -> None:
    """Models read and write camelCase and also accept Python names."""
    raw = {"poolRef": {"name": "p"}, "source": {"configMapRef": {"name": "c", "key": "k"}}}
    by_alias = PoolRunSpec.model_validate(raw)
    by_name = PoolRunSpec(
        pool_ref={"name": "p"}, source={"config_map_ref": {"name": "c", "key": "k"}}
    )
    assert by_alias == by_name
    wire = by_alias.to_wire()
    assert wire["poolRef"] == {"name": "p"}
    assert wire["maxAttempts"] == 1
    assert "routes" not in wire


def test_status_round_trips_with_timestamps() -> None:
    """A status written with to_wire() reads back equal, times as RFC 3339 with Z."""
    status = PoolRunStatus(
        phase="Running",
        total=3,
        start_time=datetime(2025, 1, 1, 10, tzinfo=UTC),
        items={"a": {"x": 1}},
        conditions=[Condition(type=reasons.ConditionType.COMPLETE, status="False")],
    )
    wire = status.to_wire()
    assert wire["startTime"] == "2025-01-01T10:00:00Z"
    assert wire["conditions"] == [{"type": "Complete", "status": "False"}]
    assert PoolRunStatus.model_validate(wire) == status


def test_parse_spec_names_each_bad_field_in_wire_terms() -> None:
    """parse_spec raises SpecError listing `spec.field: problem` with camelCase paths."""
    with pytest.raises(SpecError) as caught:
        parse_spec(PoolRunSpec, {"poolRef": {}, "cap": 0, "source": {"items": 3}})
    message = str(caught.value)
    assert message.startswith("invalid PoolRun: ")
    assert "spec.poolRef.name: Field required" in message
    assert "spec.cap: Input should be greater than or equal to 1" in message
    assert "spec.source.items: Input should be a valid list" in message


def test_whole_objects_parse_from_the_api_server_shape() -> None:
    """A raw object with metadata the models do not type keeps it, and reads typed fields."""
    raw = {
        "apiVersion": "agentpool.dev/v1alpha1",
        "kind": "AgentPool",
        "metadata": {
            "name": "echo",
            "namespace": "default",
            "generation": 2,
            "managedFields": [{"manager": "kubectl"}],
        },
        "spec": {"image": "echo:1", "minSize": 2},
    }
    pool = AgentPool.model_validate(raw)
    assert (pool.metadata.name, pool.metadata.generation, pool.spec.min_size) == ("echo", 2, 2)
    assert pool.status.replicas == 0
    assert pool.to_wire()["metadata"]["managedFields"] == [{"manager": "kubectl"}]


@pytest.mark.parametrize(
    "enum", [reasons.ConditionType, reasons.Reason, reasons.RetireReason, reasons.EventReason]
)
def test_reasons_are_single_camel_case_words(enum: type[StrEnum]) -> None:
    """Every reason is one CamelCase word, as condition reasons must be, and unique."""
    values = [member.value for member in enum]
    assert len(values) == len(set(values))
    for value in values:
        assert re.fullmatch(r"[A-Z][A-Za-z]*", value), value


def test_the_reasons_design_names_exist() -> None:
    """Every reason the resources document is defined."""
    named = {
        "ImagePullBackOff", "CrashLoopBackOff", "ReadinessFailing", "Unschedulable",
        "PoolNotFound", "NoCapacity", "CheckoutTimeout", "Drained", "Deadlocked", "PoolFull",
        "HandlerError",
    }  # fmt: skip
    assert named <= {member.value for member in reasons.Reason}
    events = {"ScaledUp", "ScaledDown", "AgentRetired", "AgentReplaced", "Started", "ItemFailed",
              "Drained", "Deadlocked", "Suspended", "Resumed"}  # fmt: skip
    assert events <= {member.value for member in reasons.EventReason}
    conditions = {"Ready", "Degraded", "Complete", "Failed", "Suspended"}
    assert conditions <= {member.value for member in reasons.ConditionType}
