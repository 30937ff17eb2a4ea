"""A bare binder: the fewest steps that can answer an AgentLease, as the baseline of scenario 6.

``python -m bench.binder KUBECONFIG NAMESPACE`` watches the namespace's leases and answers each
new one at once with the writes the operator makes before ``Bound``, in the order it makes them
(the lease's token Secret, owned by the lease, then a ``Bound`` status, since a client that sees
Bound reads its token at once), over one async HTTP session: no kopf, no checkout, no agent to
bind, nothing read. No operator that keeps that order can bind a lease faster on the same API
server and machine, so the scenario's figures are read against this one's, measured in the same
run. It prints ``watching`` once its watch cannot miss a lease made after that line.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import sys
from pathlib import Path
from typing import Any

import aiohttp

from agentpool import GROUP, VERSION
from agentpool.local.kubeconfig import ApiAccess
from bench.harness import Kube


class Binder:
    """Answers each new lease of one namespace with its Secret and a Bound status."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.leases = f"{kube.server}/apis/{GROUP}/{VERSION}/namespaces/{namespace}/agentleases"
        self.tasks: set[asyncio.Task[None]] = set()

    async def bind(self, lease: dict[str, Any]) -> None:
        name, uid = lease["metadata"]["name"], lease["metadata"]["uid"]
        owner = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AgentLease", "name": name, "uid": uid}
        token = base64.b64encode(secrets.token_urlsafe(32).encode()).decode()
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{name}-token", "ownerReferences": [owner]},
            "data": {"token": token},
        }
        status = {"status": {"phase": "Bound", "agent": "none", "endpoint": "http://127.0.0.1:1"}}
        # The Secret first: a client that sees Bound reads the token from it at once.
        await self.send(
            "POST", f"{self.kube.server}/api/v1/namespaces/{self.namespace}/secrets", json=secret
        )
        await self.send(
            "PATCH",
            f"{self.leases}/{name}/status",
            data=json.dumps(status),
            headers={"Content-Type": "application/merge-patch+json"},
        )

    async def send(self, method: str, url: str, **kwargs: Any) -> None:
        async with self.kube.session.request(method, url, **kwargs) as response:
            await response.read()
            response.raise_for_status()

    def answer(self, event: dict[str, Any]) -> None:
        lease = event["object"]
        if event["type"] == "ADDED" and not (lease.get("status") or {}).get("phase"):
            task = asyncio.create_task(self.bind(lease))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def run(self) -> None:
        async with self.kube.session.get(self.leases) as response:
            response.raise_for_status()
            version = (await response.json())["metadata"]["resourceVersion"]
        print("watching", flush=True)
        params = {"watch": "1", "resourceVersion": version, "allowWatchBookmarks": "false"}
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        async with self.kube.session.get(self.leases, params=params, timeout=timeout) as response:
            response.raise_for_status()
            async for line in response.content:
                if line.strip():
                    self.answer(json.loads(line))


async def main(kubeconfig: Path, namespace: str) -> None:
    kube = Kube(ApiAccess.from_kubeconfig(kubeconfig))
    try:
        await Binder(kube, namespace).run()
    finally:
        await kube.close()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2]))
