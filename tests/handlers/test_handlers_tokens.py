"""A starting pool reads its token Secret once: the first pass after it does not read it again,
and a Secret deleted later is still put back once the check interval has passed."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from agentpool.broker import Broker
from agentpool.handlers import tokens
from agentpool.handlers.runtime import PoolHandle
from agentpool.io.kube import ObjectNotFound
from agentpool.pool import PoolPolicy
from agentpool.settings import PoolSettings


class Kube:
    def __init__(self) -> None:
        self.secret: dict[str, Any] | None = {"data": {"token": "dG9rZW4="}}
        self.reads = 0
        self.created: list[dict[str, Any]] = []

    async def read_secret(self, namespace: str, name: str) -> dict[str, Any]:
        self.reads += 1
        if self.secret is None:
            raise ObjectNotFound(name)
        return self.secret

    async def create_secret(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self.created.append(body)
        self.secret = body
        return body


def pool_body() -> Any:
    return {
        "kind": "AgentPool",
        "metadata": {"namespace": "ns", "name": "p", "uid": "u"},
        "spec": {},
    }


async def test_the_first_pass_after_start_does_not_read_the_secret_again(monkeypatch: Any) -> None:
    monkeypatch.setattr(tokens.events, "post", lambda *a, **k: None)
    kube = Kube()
    runtime: Any = SimpleNamespace(kube=kube)
    handle = PoolHandle(
        namespace="ns",
        name="p",
        broker=Broker("p", PoolPolicy()),
        port=8080,
        wake=asyncio.Event(),
        settings=PoolSettings(secret_check_seconds=0.05),
    )
    handle.token = await tokens.open_token(runtime, handle, pool_body())
    await tokens.keep_token_secret(runtime, handle, pool_body())
    assert kube.reads == 1
    # Deleted later: put back, with the token the agents hold, once the interval has passed.
    kube.secret = None
    deadline = asyncio.get_running_loop().time() + 10
    while not kube.created and asyncio.get_running_loop().time() < deadline:
        await tokens.keep_token_secret(runtime, handle, pool_body())
        await asyncio.sleep(0.01)
    assert len(kube.created) == 1
