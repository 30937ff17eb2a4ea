"""The AgentPool status during a rollout, as the status writer builds it from the broker's
agents: updatedReplicas counts agents on the pool's template, and the Progressing condition
keeps its deadline across passes, so a stuck rollout turns False after progressDeadlineSeconds
and a moving one stays True."""

from __future__ import annotations

from typing import Any

from poolfakes import pool_handle

from agentpool.api.resources import AgentPoolSpec
from agentpool.handlers.pools import policy_of
from agentpool.handlers.poolstatus import current_status
from agentpool.pool import ObservedAgent

POOL: dict[str, Any] = {
    "apiVersion": "agentpool.dev/v1alpha1",
    "kind": "AgentPool",
    "metadata": {"name": "p", "namespace": "ns", "uid": "pool-uid", "generation": 2},
    "spec": {"image": "agent:2", "minSize": 2, "progressDeadlineSeconds": 30},
}
POLICY = policy_of(AgentPoolSpec.model_validate(POOL["spec"]))
NOW = 1000.0


def agent(name: str, template: str, *, ready: bool) -> ObservedAgent:
    return ObservedAgent(
        name,
        created_at=NOW - 5,
        ready=ready,
        ready_at=NOW - 1 if ready else None,
        idle_since=NOW - 1 if ready else None,
        template_hash=template,
    )


def progressing(status: dict[str, Any]) -> dict[str, Any]:
    (condition,) = [c for c in status["conditions"] if c["type"] == "Progressing"]
    return condition


def test_a_stuck_rollout_turns_progressing_false_after_its_deadline() -> None:
    """Two old agents serve while the new one never turns Ready: RollingOut at first, then
    ProgressDeadlineExceeded once 30 s pass without progress, naming the new pod."""
    handle = pool_handle(2)
    handle.broker.update_policy(POLICY)
    handle.broker.update_agents(
        [
            agent("p-old1", "old", ready=True),
            agent("p-old2", "old", ready=True),
            agent("p-new1", POLICY.template_hash, ready=False),
        ]
    )
    first = current_status(handle, POOL, POLICY, NOW)
    assert first["updatedReplicas"] == 1
    assert (progressing(first)["status"], progressing(first)["reason"]) == ("True", "RollingOut")
    assert progressing(first)["observedGeneration"] == 2

    later = current_status(handle, POOL, POLICY, NOW + 30)
    condition = progressing(later)
    assert (condition["status"], condition["reason"]) == ("False", "ProgressDeadlineExceeded")
    assert "p-new1" in condition["message"]


def test_a_finished_rollout_is_complete() -> None:
    """Every agent on the pool's template and Ready: Progressing True RolloutComplete, and
    updatedReplicas equals replicas."""
    handle = pool_handle(2)
    handle.broker.update_policy(POLICY)
    handle.broker.update_agents(
        [agent(f"p-new{i}", POLICY.template_hash, ready=True) for i in (1, 2)]
    )
    status = current_status(handle, POOL, POLICY, NOW)
    assert status["updatedReplicas"] == status["replicas"] == 2
    condition = progressing(status)
    assert (condition["status"], condition["reason"]) == ("True", "RolloutComplete")


def test_a_restarted_operator_keeps_a_stuck_rollout_stuck() -> None:
    """A pool whose status already says ProgressDeadlineExceeded stays False after a restart
    (a new handle, no memory) instead of counting the deadline again; once a new agent turns
    Ready the rollout moves and Progressing is True again."""
    stuck_pool = {
        **POOL,
        "status": {
            "conditions": [
                {
                    "type": "Progressing",
                    "status": "False",
                    "reason": "ProgressDeadlineExceeded",
                    "message": "rollout made no progress",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ]
        },
    }
    handle = pool_handle(2)
    handle.broker.update_policy(POLICY)
    old = [agent("p-old1", "old", ready=True), agent("p-old2", "old", ready=True)]
    handle.broker.update_agents([*old, agent("p-new1", POLICY.template_hash, ready=False)])
    status = current_status(handle, stuck_pool, POLICY, NOW)
    assert progressing(status)["reason"] == "ProgressDeadlineExceeded"

    handle.broker.update_agents([*old, agent("p-new1", POLICY.template_hash, ready=True)])
    status = current_status(handle, stuck_pool, POLICY, NOW + 1)
    assert (progressing(status)["status"], progressing(status)["reason"]) == ("True", "RollingOut")
