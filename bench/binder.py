"""A bare binder: the fewest steps that can answer an AgentLease, as the baseline of scenario 6.

``python -m bench.binder KUBECONFIG NAMESPACE`` watches the namespace's leases and answers each
new one at once with the writes the operator makes before ``Bound``, in the order it makes them
(the lease's token Secret, owned by the lease, then a ``Bound`` status, since a client that sees
Bound reads its token at once), over one async HTTP session: no kopf, no checkout, no agent to
bind, nothing read. No operator that keeps that order can bind a lease faster on the same API
server and machine, so the scenario's figures are read against this one's, measured in the same
run. It prints ``watching`` once its watch cannot miss a lease made after that line.

With ``--operator-writes`` it writes what the operator writes: the Secret as the operator makes
it and the operator's own ``Bound`` status (where to reach an agent, its token Secret, the bound
and expiry times, and the Bound, Expired and Failed conditions), built by the same functions.
Measured beside the pool's idle agents, that is what the lease's writes cost the API server and
the machine with nothing of the operator's own: the second baseline of scenario 6.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import secrets
import time
from pathlib import Path
from typing import Any

import aiohttp

from agentpool import GROUP, VERSION
from agentpool.api.base import KeyRef
from agentpool.api.conditions import format_time
from agentpool.local.kubeconfig import ApiAccess
from agentpool.pool import leases
from agentpool.pool.manifests import TOKEN_KEY, lease_token_secret, lease_token_secret_name
from bench.harness import Kube

#: The pool the scenario's leases name, and an agent name and endpoint shaped as its pods' are.
POOL = "echo"
AGENT = "echo-x7k2q"
ENDPOINT = "http://127.0.0.2:8080"


def bare_writes_of(lease: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fewest writes that answer ``lease``: a Secret it owns and a three-field status."""
    name, uid = lease["metadata"]["name"], lease["metadata"]["uid"]
    owner = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AgentLease", "name": name, "uid": uid}
    token = base64.b64encode(secrets.token_urlsafe(32).encode()).decode()
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"{name}-token", "ownerReferences": [owner]},
        "data": {"token": token},
    }
    return secret, {"status": {"phase": "Bound", "agent": "none", "endpoint": "http://127.0.0.1:1"}}


def operator_writes_of(lease: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The operator's writes for ``lease``: its token Secret and its Bound status patch."""
    name, now = lease["metadata"]["name"], time.time()
    ttl = int((lease.get("spec") or {}).get("ttlSeconds") or 300)
    status = leases.bound_status(
        pool=POOL,
        agent=AGENT,
        endpoint=ENDPOINT,
        token_secret_ref=KeyRef(name=lease_token_secret_name(name), key=TOKEN_KEY),
        bound_time=format_time(now),
        expire_time=format_time(now + ttl),
    )
    patch, _ = leases.status_patch(
        status,
        (lease.get("status") or {}).get("conditions"),
        generation=lease["metadata"].get("generation"),
        now=format_time(now),
    )
    secret = lease_token_secret(lease, POOL, secrets.token_urlsafe(32))
    return secret, {"status": patch}


class Binder:
    """Answers each new lease of one namespace with its Secret and a Bound status."""

    def __init__(self, kube: Kube, namespace: str, *, operator_writes: bool = False) -> None:
        self.kube = kube
        self.namespace = namespace
        self.leases = f"{kube.server}/apis/{GROUP}/{VERSION}/namespaces/{namespace}/agentleases"
        self.writes = operator_writes_of if operator_writes else bare_writes_of
        self.tasks: set[asyncio.Task[None]] = set()

    async def bind(self, lease: dict[str, Any]) -> None:
        name = lease["metadata"]["name"]
        secret, status = self.writes(lease)
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


async def main(kubeconfig: Path, namespace: str, *, operator_writes: bool) -> None:
    kube = Kube(ApiAccess.from_kubeconfig(kubeconfig))
    try:
        await Binder(kube, namespace, operator_writes=operator_writes).run()
    finally:
        await kube.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.binder", description=__doc__)
    parser.add_argument("kubeconfig", type=Path)
    parser.add_argument("namespace")
    parser.add_argument(
        "--operator-writes",
        action="store_true",
        help="write the Secret and the Bound status as the operator writes them",
    )
    args = parser.parse_args()
    asyncio.run(main(args.kubeconfig, args.namespace, operator_writes=args.operator_writes))
