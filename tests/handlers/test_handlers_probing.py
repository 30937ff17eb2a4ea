"""The AgentPool status writer and an agent whose readiness probe keeps failing: it lists the
namespace's Unhealthy Events only once an agent is past the probe threshold, at most every
15 s, and says Degraded ReadinessFailing with the probe's last error; a healthy pool lists
nothing."""

from __future__ import annotations

from typing import Any

from poolfakes import pool_handle, runtime_of

from agentpool.api.raw import RawEvent
from agentpool.api.resources import AgentPoolSpec
from agentpool.handlers.pools import policy_of
from agentpool.handlers.poolstatus import current_status, learn_probe_errors
from agentpool.pool import ObservedAgent

POOL: dict[str, Any] = {
    "apiVersion": "agentpool.dev/v1alpha1",
    "kind": "AgentPool",
    "metadata": {"name": "p", "namespace": "ns", "uid": "pool-uid", "generation": 1},
    "spec": {"image": "agent:1", "minSize": 1},
}
POLICY = policy_of(AgentPoolSpec.model_validate(POOL["spec"]))
STARTED = 1000.0
REFUSED = (
    'Readiness probe failed: Get "http://127.0.0.5:8080/healthz": dial tcp 127.0.0.5:8080: '
    "connect: connection refused"
)


class EventsKube:
    """The one call the probe check makes: the namespace's Events by field selector."""

    def __init__(self) -> None:
        self.listed: list[tuple[str, str]] = []

    async def list_events(self, namespace: str, fields: str) -> list[RawEvent]:
        self.listed.append((namespace, fields))
        return [
            {
                "involvedObject": {"kind": "Pod", "name": "p-a"},
                "reason": "Unhealthy",
                "message": REFUSED,
                "lastTimestamp": "2026-01-01T00:00:00Z",
            }
        ]


def degraded(status: dict[str, Any]) -> dict[str, Any]:
    (condition,) = [c for c in status["conditions"] if c["type"] == "Degraded"]
    return dict(condition)


async def test_events_are_listed_past_the_threshold_only_and_at_most_every_15_seconds() -> None:
    """Before the threshold (60 s of a running container, no cold start measured) nothing is
    listed and Degraded is False; past it the Events are listed at once, then not again for
    15 s, and Degraded names the agent and its probe's error; once it is Ready, nothing."""
    kube = EventsKube()
    runtime = runtime_of(kube)
    handle = pool_handle(1)
    handle.broker.update_policy(POLICY)
    starting = ObservedAgent("p-a", created_at=STARTED - 2, running_since=STARTED)
    handle.broker.update_agents([starting])

    await learn_probe_errors(runtime, handle, POLICY, STARTED + 59)
    assert kube.listed == []
    assert degraded(current_status(handle, POOL, POLICY, STARTED + 59))["status"] == "False"

    for at in (STARTED + 60, STARTED + 70, STARTED + 75):
        await learn_probe_errors(runtime, handle, POLICY, at)
    assert kube.listed == [("ns", "involvedObject.kind=Pod,reason=Unhealthy")] * 2
    condition = degraded(current_status(handle, POOL, POLICY, STARTED + 75))
    assert (condition["status"], condition["reason"]) == ("True", "ReadinessFailing")
    assert condition["message"] == (
        f"agent p-a has run for over 60s without turning Ready; {REFUSED}"
    )

    ready = ObservedAgent(
        "p-a", created_at=STARTED - 2, running_since=STARTED, ready=True, ready_at=STARTED + 80
    )
    handle.broker.update_agents([ready])
    await learn_probe_errors(runtime, handle, POLICY, STARTED + 100)
    assert len(kube.listed) == 2
    assert handle.probe_errors == {}
    assert degraded(current_status(handle, POOL, POLICY, STARTED + 100))["status"] == "False"
