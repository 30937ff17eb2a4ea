"""PoolPolicy reads a validated AgentPool spec and refuses impossible sizes."""

from __future__ import annotations

import re

import pytest

from agentpool.api import AgentPoolSpec
from agentpool.pool import PoolPolicy


def test_from_spec_reads_every_field() -> None:
    """Each spec attribute lands in the policy under the same name."""
    spec = AgentPoolSpec(
        min_size=2,
        max_size=5,
        strategy="FIFO",
        min_idle=1,
        idle_timeout_seconds=30,
        max_uses=10,
        max_lifetime_seconds=600,
        quarantine_after_failures=4,
        port=9000,
    )
    policy = PoolPolicy.from_spec(spec, template_hash="abc")
    assert policy == PoolPolicy(
        min_size=2,
        max_size=5,
        strategy="FIFO",
        min_idle=1,
        idle_timeout_seconds=30.0,
        max_uses=10,
        max_lifetime_seconds=600.0,
        quarantine_after_failures=4,
        template_hash="abc",
        port=9000,
    )


def test_from_spec_max_size_none_means_min_size() -> None:
    """A spec without maxSize gets maxSize = minSize, so it has no overflow."""
    policy = PoolPolicy.from_spec(AgentPoolSpec(min_size=3, max_size=None))
    assert (policy.min_size, policy.max_size, policy.max_overflow) == (3, 3, 0)


def test_from_spec_missing_fields_take_defaults() -> None:
    """An empty spec gives the documented defaults."""
    policy = PoolPolicy.from_spec(AgentPoolSpec())
    assert policy == PoolPolicy()
    assert (policy.min_size, policy.strategy, policy.idle_timeout_seconds) == (1, "LIFO", 60.0)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"min_size": 3, "max_size": 2}, "maxSize (2) must be >= minSize (3)"),
        ({"min_size": -1, "max_size": 1}, "minSize must be >= 0"),
        ({"strategy": "RANDOM"}, "strategy must be LIFO or FIFO"),
        ({"max_uses": -1}, "max_uses must be >= 0"),
        ({"idle_timeout_seconds": -1.0}, "idle_timeout_seconds must be >= 0"),
    ],
)
def test_invalid_policy_is_refused(fields: dict[str, object], message: str) -> None:
    """An impossible policy fails at once with a message naming the field."""
    with pytest.raises(ValueError, match=re.escape(message)):
        PoolPolicy(**fields)  # type: ignore[arg-type]


def test_from_spec_reads_the_api_model() -> None:
    """The AgentPool spec model, parsed from its wire form, gives the policy it describes."""
    spec = AgentPoolSpec.model_validate(
        {
            "image": "agent:1",
            "minSize": 2,
            "strategy": "FIFO",
            "minIdle": 1,
            "idleTimeoutSeconds": 5,
            "maxUses": 3,
            "maxLifetimeSeconds": 9,
            "quarantineAfterFailures": 2,
            "port": 9000,
        }
    )
    policy = PoolPolicy.from_spec(spec, template_hash="h")
    assert policy == PoolPolicy(
        min_size=2,
        max_size=2,
        strategy="FIFO",
        min_idle=1,
        idle_timeout_seconds=5.0,
        max_uses=3,
        max_lifetime_seconds=9.0,
        quarantine_after_failures=2,
        template_hash="h",
        port=9000,
    )
