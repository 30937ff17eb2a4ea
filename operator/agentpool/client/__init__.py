"""agentpool's Python client: lease warm agents, call them, and submit runs from a program.

::

    from agentpool.client import Client

    async with Client.from_kubeconfig() as client:
        async with client.lease("echo", ttl=60, context={"user": "ada"}) as agent:
            first = await agent.invoke({"text": "hello"})
            second = await agent.invoke({"text": "again"})
        output = await client.call("echo", {"text": "one item"})
        run = await client.submit("echo", [{"n": n} for n in range(1000)], cap=8)
        async for result in run.results():
            print(result.id, result.output if result.ok else result.failure)
        print(await client.pool_status("echo"))

:mod:`agentpool.client.sync` offers the same calls without ``await``. Errors are
:class:`AgentpoolError` and its kinds, each with the operator's ``reason`` and ``message``.

The Kubernetes API is reached through lightkube (with lightkube-models), chosen over
kubernetes-asyncio and kr8s: it ships type hints (``py.typed``) that hold under ``mypy --strict``
where kubernetes-asyncio's generated code has none; its ``AsyncClient`` is asyncio-native, on
httpx, with no thread pool; generic resources serve the three custom kinds without generated
code; one ``KubeConfig`` reads a kubeconfig (a CA of its own, a bearer token, exec plugins) or a
pod's service account; and its watch takes up a dropped stream again from the last
resourceVersion, or from the present after 410 Gone, which a client waiting on a lease needs.
kr8s is as easy to start with, but its objects are dynamic (attribute access on untyped boxes)
and its sync API wraps each call in an event loop of its own. The operator itself keeps the
official client (kopf needs it); the client stays apart and imports none of the operator's
modules, only the resource models (:mod:`agentpool.api`) and what it shares with the operator
and the agents (:mod:`agentpool.wire`): the protocol's words, envelope and HTTP/1.1 client, and
the reading of a run's results.
"""

from agentpool.client.client import Client
from agentpool.client.errors import (
    AgentpoolError,
    CallFailed,
    LeaseFailed,
    NotFound,
    PoolExhausted,
    RunFailed,
)
from agentpool.client.leases import LeasedAgent
from agentpool.client.records import Result
from agentpool.client.runs import Run
from agentpool.client.settings import ClientSettings

__all__ = [
    "AgentpoolError",
    "CallFailed",
    "Client",
    "ClientSettings",
    "LeaseFailed",
    "LeasedAgent",
    "NotFound",
    "PoolExhausted",
    "Result",
    "Run",
    "RunFailed",
]
