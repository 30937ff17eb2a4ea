"""The pool's series that the chart's alerts and dashboard read: the Degraded gauge follows the
condition the status says, one series per pool, and the agents a pool creates and retires are
counted by pool and reason."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import kopf
import pytest
from poolfakes import pool_handle, runtime_of

from agentpool import metrics
from agentpool.api.reasons import RetireReason
from agentpool.api.resources import AgentPoolSpec
from agentpool.handlers import pools
from agentpool.handlers.poolstatus import current_status
from agentpool.handlers.runtime import PoolHandle, Runtime
from agentpool.pool import PoolPolicy
from agentpool.pool.manifests import agent_pod
from agentpool.pool.plan import Plan, Retirement

POOL: dict[str, Any] = {
    "apiVersion": "agentpool.dev/v1alpha1",
    "kind": "AgentPool",
    "metadata": {"name": "p", "namespace": "ns", "uid": "pool-uid"},
    "spec": {"image": "agent:1", "minSize": 1},
}
SPEC = AgentPoolSpec.model_validate(POOL["spec"])
POLICY = PoolPolicy(min_size=1, max_size=1)


class Kube:
    """Creates pods, each Pending under a name of its own."""

    def __init__(self) -> None:
        self.made = 0

    async def create_pod(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self.made += 1
        name = f"p-x{self.made}"
        metadata = {**body["metadata"], "name": name, "uid": f"uid-{name}", "resourceVersion": "1"}
        return {**body, "metadata": metadata, "status": {"phase": "Pending"}}


@pytest.fixture(autouse=True)
def fresh_series() -> Iterator[None]:
    """Each test starts and ends without pool ns/p's series in the shared registry."""
    metrics.forget_pool_gauges("ns", "p")
    metrics.forget_pool_counts("ns", "p")
    yield
    metrics.forget_pool_gauges("ns", "p")
    metrics.forget_pool_counts("ns", "p")


def degraded_series() -> dict[str, float]:
    """Pool ns/p's Degraded gauge, value by reason label, as a scrape would read it."""
    (family,) = (f for f in metrics.REGISTRY.collect() if f.name == "agentpool_pool_degraded")
    return {
        s.labels["reason"]: s.value
        for s in family.samples
        if (s.labels["namespace"], s.labels["pool"]) == ("ns", "p")
    }


def served() -> tuple[Runtime, PoolHandle]:
    runtime = runtime_of(Kube())
    handle = pool_handle(1)
    runtime.pools.serve(handle)
    return runtime, handle


def failed_pod(reason: str) -> dict[str, Any]:
    body = agent_pod(POOL, spec=SPEC)
    metadata = {**body["metadata"], "name": "p-x1", "uid": "uid-x1", "resourceVersion": "2"}
    return {**body, "metadata": metadata, "status": {"phase": "Failed", "reason": reason}}


def test_degraded_gauge_says_the_conditions_reason_and_clears_with_it() -> None:
    """A pool whose agent failed with NoLocalCommand shows degraded=1 with that reason; once
    the failed agent is gone and forgotten, the pool's one series is 0 with AsExpected, and the
    old reason's series is gone so an alert on it resolves."""
    _, handle = served()
    current_status(handle, POOL, POLICY, time.time())
    assert degraded_series() == {"AsExpected": 0}

    handle.pods["p-x1"] = failed_pod("NoLocalCommand")
    pools.sync_broker(handle)
    status = current_status(handle, POOL, POLICY, time.time())
    (degraded,) = (c for c in status["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "NoLocalCommand")
    assert degraded_series() == {"NoLocalCommand": 1}

    handle.pods.clear()
    pools.sync_broker(handle)
    handle.health = type(handle.health)()
    current_status(handle, POOL, POLICY, time.time())
    assert degraded_series() == {"AsExpected": 0}


def test_deleted_pool_leaves_no_degraded_series() -> None:
    """A deleted pool's Degraded gauge goes with its other gauges."""
    _, handle = served()
    current_status(handle, POOL, POLICY, time.time())
    metrics.forget_pool_gauges("ns", "p")
    assert degraded_series() == {}


async def test_created_and_retired_agents_are_counted_by_pool_and_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two agents created, then one retired as IdleTimeout and one as Failed: the churn
    counters say so."""
    monkeypatch.setattr(pools.events, "post", lambda *a, **k: None)
    runtime, handle = served()
    created = await pools.create_agents(
        runtime, handle, body=kopf.Body(POOL), pool=POOL, spec=SPEC, wanted=2, now=1000.0
    )
    assert created == 2
    assert (
        metrics.REGISTRY.get_sample_value(
            "agentpool_agents_created_total", {"namespace": "ns", "pool": "p"}
        )
        == 2
    )
    plan = Plan(
        create=0,
        retire=(
            Retirement("p-x1", RetireReason.IDLE_TIMEOUT),
            Retirement("p-x2", RetireReason.FAILED),
        ),
        desired=0,
    )
    done = pools.retire(handle, kopf.Body(POOL), plan, 1001.0)
    assert len(done) == 2
    for reason in ("IdleTimeout", "Failed"):
        assert (
            metrics.REGISTRY.get_sample_value(
                "agentpool_agents_retired_total", {"namespace": "ns", "pool": "p", "reason": reason}
            )
            == 1
        )
