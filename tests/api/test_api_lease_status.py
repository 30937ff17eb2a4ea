"""The statuses the lease controller writes: conditions that follow the phase, nothing left to
reach the agent with once a lease ends, and every one accepted by the AgentLease schema."""

from __future__ import annotations

from typing import Any

import pytest

from agentpool.api.base import KeyRef
from agentpool.api.conditions import merge_conditions
from agentpool.local.apiserver.schema.structural import apply_defaults, prune
from agentpool.local.apiserver.schema.validation import validate
from agentpool.pool import leases

BOUND = leases.bound_status(
    pool="p",
    agent="p-x7k2q",
    endpoint="http://10.0.0.7:8080",
    token_secret_ref=KeyRef(name="chat-lease-token", key="token"),
    bound_time="2026-01-01T00:00:00Z",
    expire_time="2026-01-01T00:05:00Z",
).to_patch()
STATUSES = {
    "Pending": leases.pending_status("p").to_patch(),
    "Bound": BOUND,
    "Released": leases.ended_status("Released", "Released", "The lease was deleted").to_patch(),
    "Expired": leases.ended_status(
        "Expired", "Expired", "The lease passed its ttl of 300s"
    ).to_patch(),
    "Failed": leases.ended_status("Failed", "PoolFull", "pool p has no idle agent").to_patch(),
}


def stored(status: dict[str, Any]) -> dict[str, Any]:
    """The status as the API server keeps it after a merge patch over a Bound one: a null
    clears the field."""
    merged = {**BOUND, **status}
    return {key: value for key, value in merged.items() if value is not None}


def with_conditions(status: dict[str, Any]) -> dict[str, Any]:
    current = leases.lease_conditions(status["phase"], status["reason"], status["message"])
    stamped = merge_conditions(None, current, generation=1, now="2026-01-01T00:00:01Z")
    return {**status, "conditions": stamped, "observedGeneration": 1}


@pytest.mark.parametrize(
    ("phase", "holding"),
    [
        ("Pending", None),
        ("Bound", "Bound"),
        ("Released", None),
        ("Expired", "Expired"),
        ("Failed", "Failed"),
    ],
)
def test_the_condition_the_phase_names_holds_and_each_says_why(
    phase: str, holding: str | None
) -> None:
    """Bound, Expired and Failed are always there; only the one the phase names is True, and
    each carries the phase's reason and message (a Bound lease's names its agent's pod)."""
    status = STATUSES[phase]
    found = leases.lease_conditions(status["phase"], status["reason"], status["message"])
    assert [cond.type for cond in found] == ["Bound", "Expired", "Failed"]
    assert [cond.type for cond in found if cond.status == "True"] == ([holding] if holding else [])
    assert {(cond.reason, cond.message) for cond in found} == {
        (status["reason"], status["message"])
    }
    if phase == "Bound":
        assert "p-x7k2q" in found[0].message


@pytest.mark.parametrize("phase", ["Released", "Expired", "Failed"])
def test_an_ended_lease_keeps_nothing_to_reach_its_agent_with(phase: str) -> None:
    """Once a lease ends, no agent, endpoint or token Secret is left in its status."""
    kept = stored(STATUSES[phase])
    assert kept["phase"] == phase
    assert [field for field in ("agent", "endpoint", "tokenSecretRef") if field in kept] == []


@pytest.mark.parametrize("phase", list(STATUSES))
def test_every_lease_status_is_one_the_schema_accepts(schemas: dict[str, Any], phase: str) -> None:
    """The API server takes each status as written, with nothing pruned: a status it refused
    would leave the lease showing an older one."""
    schema = schemas["AgentLease"]
    lease = {
        "apiVersion": "agentpool.dev/v1alpha1",
        "kind": "AgentLease",
        "metadata": {"name": "chat", "namespace": "default"},
        "spec": {"poolRef": {"name": "p"}},
        "status": with_conditions(
            {key: value for key, value in STATUSES[phase].items() if value is not None}
        ),
    }
    obj = apply_defaults(schema, lease)
    assert validate(schema, obj) == []
    _, pruned = prune(schema, obj)
    assert pruned == []


def test_a_stored_status_reads_back_as_written_and_a_refused_one_as_none() -> None:
    """The lease handler reads what it wrote as the model it wrote it from. A status the model
    refuses (written by hand) keeps only its phase, so an ended lease is never bound again and
    a live one is served as a new one, instead of failing its handler on every event."""
    bound = leases.stored_status(BOUND)
    assert bound.to_patch() == {key: value for key, value in BOUND.items() if value is not None}
    assert leases.stored_status({"phase": "Lost", "agent": "p-x7k2q"}).agent is None
    assert leases.stored_status({"phase": "Lost"}).phase is None
    assert leases.stored_status({"phase": "Expired", "boundTime": "garbage"}).phase == "Expired"
    assert leases.stored_status(None).phase is None
