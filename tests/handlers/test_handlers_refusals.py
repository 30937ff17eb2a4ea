"""A pod the API server refuses (a template's typo, a forbidden field): the pool backs off as it
does for agents that fail at start, says so in Degraded with the server's own words, and posts a
Warning Event on the back-off's steps only, never one a second. A template's dry run reports the
refusal before any pod is made, and a fixed template lets creation go ahead at once."""

from __future__ import annotations

import time
from typing import Any

import kopf
import pytest
from poolfakes import pool_handle, runtime_of

from agentpool.api.resources import AgentPoolSpec
from agentpool.handlers import pools
from agentpool.handlers.poolstatus import current_status
from agentpool.handlers.runtime import PoolHandle, Runtime
from agentpool.io import events
from agentpool.io.kube import Refused
from agentpool.pool import PoolPolicy

POOL: dict[str, Any] = {
    "apiVersion": "agentpool.dev/v1alpha1",
    "kind": "AgentPool",
    "metadata": {"name": "p", "namespace": "ns", "uid": "pool-uid", "generation": 1},
    "spec": {"image": "agent:1", "minSize": 1},
}
SPEC = AgentPoolSpec.model_validate(POOL["spec"])
POLICY = PoolPolicy.from_spec(SPEC, template_hash="t1")
TYPO = (
    'Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
    'unknown field "spec.containers[0].comand"'
)


class Kube:
    """Refuses pod creates with ``refusal`` while it is set, else makes them; counts both."""

    def __init__(self, refusal: str | None) -> None:
        self.refusal = refusal
        self.creates = 0
        self.dry_runs = 0

    async def create_pod(
        self, namespace: str, body: dict[str, Any], *, dry_run: bool = False
    ) -> dict[str, Any]:
        if dry_run:
            self.dry_runs += 1
        else:
            self.creates += 1
        if self.refusal is not None:
            raise Refused(self.refusal)
        metadata = {**body["metadata"], "name": f"p-{self.creates}", "uid": f"u{self.creates}"}
        return {**body, "metadata": metadata, "status": {"phase": "Pending"}}


@pytest.fixture
def posted(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, str]]:
    """The Events the handlers post, as (type, reason, message) dicts."""
    seen: list[dict[str, str]] = []

    def post(obj: Any, *, type: str, reason: str, message: str) -> None:
        seen.append({"type": type, "reason": reason, "message": message})

    monkeypatch.setattr(events, "post", post)
    return seen


def served(kube: Kube) -> tuple[Runtime, PoolHandle]:
    runtime = runtime_of(kube)
    handle = pool_handle(1)
    runtime.pools.serve(handle)
    return runtime, handle


async def create(runtime: Runtime, handle: PoolHandle, now: float) -> int:
    return await pools.create_agents(
        runtime, handle, body=kopf.Body(POOL), pool=POOL, spec=SPEC, wanted=1, now=now
    )


async def check(runtime: Runtime, handle: PoolHandle, policy: PoolPolicy, now: float) -> None:
    await pools.check_template(
        runtime, handle, body=kopf.Body(POOL), pool=POOL, spec=SPEC, policy=policy, now=now
    )


def degraded(handle: PoolHandle, now: float) -> dict[str, Any]:
    status = current_status(handle, POOL, POLICY, now)
    (condition,) = (c for c in status["conditions"] if c["type"] == "Degraded")
    return condition


async def test_a_refused_create_backs_off_and_posts_events_on_its_steps_only(
    posted: list[dict[str, str]],
) -> None:
    """Ten minutes of a pass every second: a handful of attempts (1, 2, 4, ... 60 s apart) and
    four Warning Events (the 1st, 2nd, 4th and 8th refusal), each with the server's words."""
    kube = Kube(TYPO)
    runtime, handle = served(kube)
    for second in range(600):
        assert await create(runtime, handle, 1000.0 + second) == 0
    assert 10 <= kube.creates <= 16
    assert [event["reason"] for event in posted] == ["CreateFailed"] * 4
    assert all(event["type"] == "Warning" and TYPO in event["message"] for event in posted)
    assert "(8 times in a row)" in posted[-1]["message"]


async def test_a_refused_create_makes_the_pool_degraded_in_the_servers_words(
    posted: list[dict[str, str]],
) -> None:
    runtime, handle = served(Kube(TYPO))
    await create(runtime, handle, 1000.0)
    condition = degraded(handle, 1000.0)
    assert condition["status"] == "True"
    assert condition["reason"] == "CreateFailed"
    assert condition["message"].startswith(f"The API server refused the agent pod (once): {TYPO}.")
    assert "spec.template" in condition["message"]
    assert "validation error" not in condition["message"]


async def test_a_create_that_succeeds_again_ends_the_refusal(
    posted: list[dict[str, str]],
) -> None:
    kube = Kube(TYPO)
    runtime, handle = served(kube)
    await create(runtime, handle, 1000.0)
    kube.refusal = None
    assert await create(runtime, handle, 1000.5) == 0, "still backing off"
    assert await create(runtime, handle, 1001.0) == 1
    assert degraded(handle, 1001.0)["reason"] != "CreateFailed"
    assert handle.health.creation_hold(1001.0) == 0


async def test_a_refused_template_is_reported_by_its_dry_run_before_any_pod(
    posted: list[dict[str, str]],
) -> None:
    """A new template is dry-run once: refused, the pool is Degraded and creation holds
    without a single real create; the same template is not dry-run again."""
    kube = Kube(TYPO)
    runtime, handle = served(kube)
    await check(runtime, handle, POLICY, 1000.0)
    await check(runtime, handle, POLICY, 1000.2)
    assert await create(runtime, handle, 1000.5) == 0
    assert (kube.dry_runs, kube.creates) == (1, 0)
    assert degraded(handle, 1000.5)["reason"] == "CreateFailed"
    assert len(posted) == 1


async def test_a_fixed_template_lets_creation_go_ahead_at_once(
    posted: list[dict[str, str]],
) -> None:
    kube = Kube(TYPO)
    runtime, handle = served(kube)
    await check(runtime, handle, POLICY, 1000.0)
    kube.refusal = None
    fixed = PoolPolicy.from_spec(SPEC, template_hash="t2")
    await check(runtime, handle, fixed, 1000.1)
    assert kube.dry_runs == 2
    assert await create(runtime, handle, 1000.2) == 1
    assert degraded(handle, time.time())["status"] == "False"


async def test_a_dry_run_that_fails_for_another_cause_is_asked_again(
    posted: list[dict[str, str]],
) -> None:
    """A dry run lost to a dropped connection says nothing of the template: no Degraded, and the
    next pass asks again."""

    class Flaky(Kube):
        async def create_pod(
            self, namespace: str, body: dict[str, Any], *, dry_run: bool = False
        ) -> dict[str, Any]:
            self.dry_runs += 1
            raise ConnectionResetError("connection reset by peer")

    kube = Flaky(None)
    runtime, handle = served(kube)
    await check(runtime, handle, POLICY, 1000.0)
    await check(runtime, handle, POLICY, 1001.0)
    assert kube.dry_runs == 2
    assert handle.health.create_refusal is None
    assert posted == []


async def test_a_refusal_whose_cause_went_is_cleared_when_no_pod_is_wanted(
    posted: list[dict[str, str]],
) -> None:
    """A create refused for a cause outside the template (a quota, an admission webhook) while
    a burst wanted pods; the burst ends and the cause goes: no create comes to clear the
    refusal, so once the back-off has run, the pool asks again by a dry run, and Degraded
    clears. While the back-off runs, nothing is asked."""
    kube = Kube('pods "p-1" is forbidden: exceeded quota: agents, requested: pods=1')
    runtime, handle = served(kube)
    await check(runtime, handle, POLICY, 999.0)
    kube.refusal = None
    await create(runtime, handle, 1000.0)
    assert handle.health.create_refusal is None
    kube.refusal = 'pods "p-2" is forbidden: exceeded quota: agents, requested: pods=1'
    await create(runtime, handle, 1001.0)
    assert degraded(handle, 1001.0)["reason"] == "CreateFailed"
    kube.refusal = None
    await check(runtime, handle, POLICY, 1001.5)
    assert kube.dry_runs == 1, "asked again only once the back-off has run"
    await check(runtime, handle, POLICY, 1003.0)
    assert kube.dry_runs == 2
    assert degraded(handle, 1003.0)["reason"] != "CreateFailed"
