"""What the AgentPool tests on the local cluster share: pool status, leases, Events, runs."""

from __future__ import annotations

from typing import Any

from operator_support import Api

from cluster import wait_for


def pool_status(api: Api, namespace: str, name: str) -> dict[str, Any]:
    return api.status("agentpools", namespace, name)


def lease(api: Api, namespace: str, name: str, pool: str, **spec: Any) -> None:
    api.create("agentleases", namespace, name, {"poolRef": {"name": pool}, **spec})


def lease_phase(api: Api, namespace: str, name: str) -> str | None:
    return api.status("agentleases", namespace, name).get("phase")


def retired_event(api: Api, namespace: str, agent: str, reason: str) -> str:
    """The AgentRetired event of ``agent`` naming ``reason``; Events are posted in the background,
    so it is waited for."""
    found: str = wait_for(
        lambda: next(
            (
                e.get("message", "")
                for e in api.events(namespace)
                if e.get("reason") == "AgentRetired"
                and agent in e.get("message", "")
                and reason in e.get("message", "")
            ),
            "",
        ),
        10,
        message=f"AgentRetired {reason} for {agent}",
    )
    return found


def bound_agent(api: Api, namespace: str, name: str, timeout: float = 60) -> str:
    status = wait_for(
        lambda: (s := api.status("agentleases", namespace, name)).get("phase") == "Bound" and s,
        timeout,
        message=f"lease {name} bound",
    )
    return str(status["agent"])


def run_to_end(api: Api, namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    api.create("poolruns", namespace, name, spec)
    return wait_for(
        lambda: (
            (s := api.status("poolruns", namespace, name)).get("phase") in ("Succeeded", "Failed")
            and s
        ),
        90,
        message=f"run {name} finished",
    )
