"""The simulated local kubelet of the benchmarks: pods turn Ready without a process, and one
in-process agent answers the protocol on every pod's own address, with the pool's token."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentpool.handlers.operator import embedded_operator
from agentpool.local.cluster import LocalCluster
from agentpool.local.kubelet.processes import pod_processes

pytestmark = pytest.mark.local_only("simulated pods exist only on the local kubelet")

DELAY = 0.3
TOKEN = "pool-secret-token"


def agent_pod(name: str, secret: str) -> dict[str, Any]:
    """A pod as the operator makes one: the port and the token (from a Secret) in its env."""
    container = {
        "name": "agent",
        "image": "agentpool:0.1.0",
        "command": ["python", "-m", "agentpool.agent", "nowhere:agent"],
        "env": [
            {"name": "AGENT_PORT", "value": "8080"},
            {
                "name": "AGENTPOOL_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": secret, "key": "token"}},
            },
        ],
        "ports": [{"name": "agent", "containerPort": 8080}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"test": "simulated"}},
        "spec": {"containers": [container], "restartPolicy": "Never"},
    }


class Api:
    """A few calls to the local API server."""

    def __init__(self, cluster: LocalCluster, session: aiohttp.ClientSession) -> None:
        self.url = cluster.url
        self.session = session
        self.headers = cluster.access.headers()
        self.ssl = cluster.access.ssl_context()

    async def call(self, method: str, path: str, body: Any = None) -> Any:
        async with self.session.request(
            method, self.url + path, json=body, headers=self.headers, ssl=self.ssl
        ) as response:
            return await response.json() if response.status < 300 else None

    async def ready_ips(self, selector: str) -> list[str]:
        found = await self.call("GET", f"/api/v1/namespaces/default/pods?labelSelector={selector}")
        return [
            pod["status"]["podIP"]
            for pod in (found or {}).get("items") or []
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in (pod.get("status") or {}).get("conditions") or []
            )
        ]


async def until(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := await check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout}s for {what}")
        await asyncio.sleep(0.05)
    return value


@pytest.fixture
async def simulated(tmp_path: Path) -> AsyncIterator[tuple[LocalCluster, Api]]:
    async with (
        LocalCluster(tmp_path / "cluster", kubelet={"simulated_delay": DELAY}) as cluster,
        aiohttp.ClientSession() as session,
    ):
        api = Api(cluster, session)
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "pool-token"},
            "data": {"token": base64.b64encode(TOKEN.encode()).decode()},
        }
        await api.call("POST", "/api/v1/namespaces/default/secrets", secret)
        yield cluster, api


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_simulated_pods_turn_ready_on_addresses_of_their_own_without_a_process(
    simulated: tuple[LocalCluster, Api],
) -> None:
    """Twenty pods turn Ready, each on its own address, and no process serves any of them."""
    _, api = simulated
    for index in range(20):
        await api.call(
            "POST", "/api/v1/namespaces/default/pods", agent_pod(f"a-{index}", "pool-token")
        )
    ips = await until(
        lambda: _at_least(api.ready_ips("test=simulated"), 20), 60, "20 ready simulated pods"
    )
    assert len(set(ips)) == 20
    assert all(pod_processes(ip) == [] for ip in ips)


async def _at_least(found: Any, count: int) -> list[str] | None:
    values: list[str] = await found
    return values if len(values) >= count else None


async def test_an_invoke_is_echoed_after_the_delay_and_the_agent_is_busy_meanwhile(
    simulated: tuple[LocalCluster, Api],
) -> None:
    """POST /invoke answers the item after the set delay; /status shows the item in hand
    while it runs and counts it afterwards."""
    _, api = simulated
    await api.call("POST", "/api/v1/namespaces/default/pods", agent_pod("echo", "pool-token"))
    [ip] = await until(lambda: _at_least(api.ready_ips("test=simulated"), 1), 60, "a ready pod")
    base = f"http://{ip}:8080"
    envelope = {"id": "item-7", "item": {"text": "hello"}, "input": None, "attempt": 1}
    async with aiohttp.ClientSession(headers=bearer(TOKEN)) as agent:

        async def call() -> tuple[int, Any]:
            async with agent.post(f"{base}/invoke", json=envelope) as response:
                return response.status, await response.json()

        started = time.monotonic()
        invoke = asyncio.create_task(call())

        async def busy() -> Any:
            async with agent.get(f"{base}/status") as response:
                body = await response.json()
            return body if body["busy"] or invoke.done() else None

        during = await until(busy, 30, "the agent to report the item in hand")
        assert (during["busy"], during["current"]) == (True, "item-7")
        status, body = await invoke
        assert time.monotonic() - started >= DELAY
        assert (status, body) == (200, {"output": {"text": "hello"}})
        async with agent.get(f"{base}/status") as response:
            after = await response.json()
        assert (after["busy"], after["uses"]) == (False, 1)


async def test_the_pool_token_is_enforced_and_a_deleted_pod_stops_answering(
    simulated: tuple[LocalCluster, Api],
) -> None:
    """Without the pool's token every path but /healthz is refused; the token comes from the
    Secret the pod's env names. Deleting the pod takes its agent away with it."""
    _, api = simulated
    await api.call("POST", "/api/v1/namespaces/default/pods", agent_pod("guarded", "pool-token"))
    [ip] = await until(lambda: _at_least(api.ready_ips("test=simulated"), 1), 60, "a ready pod")
    base = f"http://{ip}:8080"
    envelope = {"id": 1, "item": 1}
    async with aiohttp.ClientSession() as agent:
        async with agent.get(f"{base}/healthz") as response:
            assert response.status == 200
        for headers in ({}, bearer("not-the-token"), {"Authorization": TOKEN}):
            async with agent.post(f"{base}/invoke", json=envelope, headers=headers) as response:
                assert response.status == 401
                assert (await response.json())["error"]["reason"] == "Unauthorized"
            async with agent.get(f"{base}/status", headers=headers) as response:
                assert response.status == 401
        async with agent.post(f"{base}/invoke", json=envelope, headers=bearer(TOKEN)) as response:
            assert response.status == 200
        await api.call("DELETE", "/api/v1/namespaces/default/pods/guarded")
        await until(
            lambda: _gone(api.call("GET", "/api/v1/namespaces/default/pods/guarded")),
            60,
            "the pod to go",
        )
        with pytest.raises(aiohttp.ClientConnectionError):
            async with agent.get(f"{base}/healthz") as response:
                await response.read()


async def _gone(found: Any) -> bool:
    return await found is None


async def test_the_operator_fills_a_pool_with_simulated_agents_and_runs_items_on_them(
    tmp_path: Path,
) -> None:
    """An AgentPool of 8 turns Ready on simulated agents, and a PoolRun's items come back
    echoed: the operator cannot tell the simulation from agents."""
    operator = embedded_operator(tmp_path / "state")
    async with (
        LocalCluster(
            tmp_path / "cluster", operator=operator, kubelet={"simulated_delay": 0.01}
        ) as cluster,
        aiohttp.ClientSession() as session,
    ):
        api = Api(cluster, session)
        pools = "/apis/agentpool.dev/v1alpha1/namespaces/default"
        pool = {
            "apiVersion": "agentpool.dev/v1alpha1",
            "kind": "AgentPool",
            "metadata": {"name": "sim"},
            "spec": {"image": "agentpool:0.1.0", "minSize": 8, "maxSize": 8},
        }
        await api.call("POST", f"{pools}/agentpools", pool)

        async def ready() -> bool:
            found = await api.call("GET", f"{pools}/agentpools/sim")
            return ((found or {}).get("status") or {}).get("readyReplicas") == 8

        await until(ready, 120, "8 ready agents in the pool")
        run = {
            "apiVersion": "agentpool.dev/v1alpha1",
            "kind": "PoolRun",
            "metadata": {"name": "echo"},
            "spec": {"poolRef": {"name": "sim"}, "cap": 4, "source": {"items": list(range(40))}},
        }
        await api.call("POST", f"{pools}/poolruns", run)

        async def finished() -> Any:
            found = await api.call("GET", f"{pools}/poolruns/echo")
            status = (found or {}).get("status") or {}
            return status if status.get("phase") in ("Succeeded", "Failed") else None

        status = await until(finished, 120, "the run to end")
        assert (status["phase"], status["succeeded"]) == ("Succeeded", 40)
        assert status["items"] == {str(i): i for i in range(40)}
