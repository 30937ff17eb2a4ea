"""The run daemon's decisions around the engine: the journal's name, the pools a run follows,
a changed source, an invalid spec, and when a finished run is deleted."""

from __future__ import annotations

from typing import Any

import pytest

from agentpool.api import PoolRunSpec
from agentpool.runs.lifecycle import (
    invalid_spec_status,
    named_pools,
    repin,
    run_uid,
    source_changed,
    ttl_remaining,
)
from agentpool.runs.sources import source_digest

SOURCE = {"items": [{"x": 1}]}
DIGEST = source_digest(SOURCE)


@pytest.mark.parametrize(
    ("metadata", "uid"),
    [
        ({"uid": "u-1", "namespace": "n", "name": "r"}, "u-1"),
        ({"namespace": "n", "name": "r"}, "n.r"),
    ],
)
def test_the_journal_is_named_by_uid(metadata: dict[str, Any], uid: str) -> None:
    """A run made again under the same name never reads its predecessor's journal."""
    assert run_uid(metadata) == uid


@pytest.mark.parametrize(
    ("spec", "pools"),
    [
        ({"poolRef": {"name": "p"}, "source": SOURCE}, ["p"]),
        (
            {
                "poolRef": {"name": "p"},
                "routes": {"field": "kind", "pools": {"a": "q", "b": "r"}},
                "source": SOURCE,
            },
            ["p", "q", "r"],
        ),
    ],
)
def test_a_run_follows_every_pool_it_names(spec: dict[str, Any], pools: list[str]) -> None:
    """The poolRef, then every pool the routes send items to."""
    assert named_pools(PoolRunSpec.model_validate(spec)) == pools


@pytest.mark.parametrize(
    ("pinned", "generation", "source", "after", "changed"),
    [
        # A status write: the generation holds, nothing is digested.
        ((2, DIGEST), 2, {"items": []}, (2, DIGEST), False),
        # A spec change that leaves the source alone.
        ((2, DIGEST), 3, SOURCE, (3, DIGEST), False),
        # A spec change to the source.
        ((2, DIGEST), 3, {"items": [{"x": 2}]}, (3, DIGEST), True),
        ((0, DIGEST), None, SOURCE, (0, DIGEST), False),
    ],
)
def test_a_changed_source_is_seen_on_a_spec_change(
    pinned: tuple[int, str],
    generation: int | None,
    source: Any,
    after: tuple[int, str],
    changed: bool,
) -> None:
    """The run keeps the digest it started on and compares it only when the spec moved."""
    assert repin(pinned, generation, source) == (after, changed)


def test_a_changed_source_names_what_changed() -> None:
    """A ConfigMap source names the ConfigMap and key as well as spec.source."""
    message = source_changed({"configMapRef": {"name": "cm", "key": "k"}})
    assert "spec.source or configmap cm key k" in message
    assert "(spec.source)" in source_changed(SOURCE)


def test_an_invalid_spec_fails_the_run_with_a_condition() -> None:
    """The run ends Failed, with an InvalidSpec condition that says what to fix."""
    status = invalid_spec_status("the spec is invalid: x", finished="2026-01-01T00:00:00Z")
    assert status["phase"] == "Failed"
    [condition] = status["conditions"]
    assert (condition["reason"], condition["message"]) == ("InvalidSpec", "the spec is invalid: x")
    assert status["completionTime"] == condition["lastTransitionTime"]


@pytest.mark.parametrize(
    ("ttl", "now", "remaining"),
    [(None, 100.0, None), (60, 100.0, 10.0), (60, 200.0, -90.0), (0, 50.0, 0.0)],
)
def test_a_finished_run_goes_after_its_ttl(
    ttl: float | None, now: float, remaining: float | None
) -> None:
    """Without ttlSecondsAfterFinished a run stays; with it, it goes that long after it ended."""
    assert ttl_remaining(50.0, ttl, now) == remaining
