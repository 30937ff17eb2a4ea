"""Failed agent pods kept for a post-mortem: the newest few, for a while, then deleted."""

from __future__ import annotations

import pytest

from agentpool.pool.pods import failed_at
from agentpool.pool.postmortem import KEEP_FAILED_PODS, expired
from agentpool.settings import PoolSettings

KEEP_FAILED_SECONDS = PoolSettings().keep_failed_seconds

NOW = 10_000.0


@pytest.mark.parametrize(
    ("failed", "gone"),
    [
        ({}, []),
        ({"a": NOW - 5}, []),
        # Past the time kept: deleted.
        ({"a": NOW - KEEP_FAILED_SECONDS, "b": NOW - 1}, ["a"]),
        # More than five: the oldest go, whatever their age.
        ({f"p{n}": NOW - n for n in range(7)}, ["p5", "p6"]),
        # Equal times: the name decides, so every pass decides alike.
        ({f"p{n}": NOW for n in range(6)}, ["p5"]),
    ],
)
def test_failed_pods_are_kept_newest_first_for_a_while(
    failed: dict[str, float], gone: list[str]
) -> None:
    """The newest five failed pods stay for ten minutes after they failed, then go."""
    assert KEEP_FAILED_PODS == 5
    assert expired(failed, NOW, keep_seconds=KEEP_FAILED_SECONDS) == gone


def test_failed_at_reads_when_the_container_ended() -> None:
    """The time a pod failed is when its container terminated; a pod that says none has none."""
    pod = {
        "metadata": {"name": "p"},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {"state": {"terminated": {"exitCode": 1, "finishedAt": "2026-01-01T00:00:10Z"}}}
            ],
        },
    }
    assert failed_at(pod) == 1767225610.0
    assert failed_at({"metadata": {"name": "p"}, "status": {"phase": "Failed"}}) is None
