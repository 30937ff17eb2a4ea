"""A replica acts (and its gateway says it is ready) only while no live peer outranks it, as kopf
decides from the same peering object."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from agentpool.handlers.standby import acts, peering_paths

NOW = datetime.datetime(2026, 12, 3, 12, 0, 0, tzinfo=datetime.UTC)


def peer(priority: int, *, seen_seconds_ago: float = 1, lifetime: int = 60) -> dict[str, Any]:
    seen = NOW - datetime.timedelta(seconds=seen_seconds_ago)
    return {"priority": priority, "lifetime": lifetime, "lastseen": seen.isoformat()}


@pytest.mark.parametrize(
    ("peers", "expected"),
    [
        ({}, True),
        ({"me": peer(5)}, True),
        ({"me": peer(5), "other": peer(4)}, True),
        ({"me": peer(5), "other": peer(6)}, False),
        ({"me": peer(5), "other": peer(5)}, False),
        ({"me": peer(5), "other": peer(9, seen_seconds_ago=61)}, True),
        ({"me": peer(5), "other": {"priority": "x"}}, True),
        ({"me": peer(5), "other": "garbled"}, True),
        ({"other": {**peer(9), "lastseen": "2026-12-03T11:59:59"}}, False),
    ],
)
def test_a_replica_acts_unless_a_live_peer_outranks_it(
    peers: dict[str, Any], expected: bool
) -> None:
    """A live peer of higher or equal priority makes this one stand by; a dead one, or a
    garbled entry, does not."""
    assert acts(peers, identity="me", priority=5, now=NOW) is expected


def test_the_peering_objects_read_are_the_ones_kopf_keeps() -> None:
    """Cluster-wide, the ClusterKopfPeering; serving namespaces, each one's KopfPeering, but a
    namespace pattern names none."""
    assert peering_paths("agentpool", []) == ["/apis/kopf.dev/v1/clusterkopfpeerings/agentpool"]
    assert peering_paths("agentpool", ["a", "t-*"]) == [
        "/apis/kopf.dev/v1/namespaces/a/kopfpeerings/agentpool"
    ]
