"""What the lease handler tests share: agents that speak the binding's side of the protocol, an
API server of Secrets and lease statuses in memory, the clock the handlers go by, the kopf
context they run in, and the watch events that drive them.

The clock is the event loop's: a test marked ``looptime`` (the looptime plugin) sees a lease's
term pass as soon as nothing else is left to run, rather than waiting it out."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, cast

import kopf
from aiohttp import web
from kopf._cogs.configs.configuration import OperatorSettings
from kopf._core.engines import posting

from agentpool.api.raw import RawBody, raw_body
from agentpool.broker import Broker
from agentpool.handlers import leases
from agentpool.handlers.runtime import PoolHandle, Runtime
from agentpool.io.agents import AgentClient
from agentpool.io.kube import Conflict, Kube, ObjectNotFound
from agentpool.pool import ObservedAgent, PoolPolicy
from agentpool.runs import Clock
from clocks import LoopClock

POOL_TOKEN = "pool-token-0c7d2e"
NAMESPACE = "ns"
T = TypeVar("T")


@dataclass
class FakeAgent:
    """One agent's binding side: /bind and /unbind with the pool's token, answered as scripted
    (a status to answer with, or an Event to hold the answer until set)."""

    name: str
    host: str
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    bind_answer: int = 200
    unbind_answer: int = 200
    bind_gate: asyncio.Event | None = None
    bound: dict[str, Any] | None = None

    async def bind(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls.append(("bind", body))
        if request.headers.get("Authorization") != f"Bearer {POOL_TOKEN}":
            return web.json_response({"error": {"reason": "Unauthorized"}}, status=401)
        if self.bind_gate is not None:
            await self.bind_gate.wait()
        if self.bind_answer != 200:
            error = {"reason": "BindFailed", "message": "the bind hook raised"}
            return web.json_response({"error": error}, status=self.bind_answer)
        self.bound = body
        return web.json_response({"lease": body["lease"], "expireTime": body["expireTime"]})

    async def unbind(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls.append(("unbind", body))
        if self.unbind_answer != 200:
            error = {"reason": "UnbindFailed", "message": "the reset raised"}
            return web.json_response({"error": error}, status=self.unbind_answer)
        if self.bound is not None and self.bound["lease"] == body["lease"]:
            self.bound = None
        return web.json_response({})

    def paths(self) -> list[str]:
        return [path for path, _ in self.calls]


class LeaseApi(Protocol):
    """The calls the lease handlers make of :class:`~agentpool.io.kube.Kube`. Kube is a class,
    not a protocol, so both it and :class:`FakeApi` are held to this one: a change to either's
    signatures shows under mypy, not as a fake that no longer answers as the client does."""

    async def list_custom(self, plural: str, namespace: str) -> list[RawBody]: ...

    async def get_custom(self, plural: str, namespace: str, name: str) -> RawBody: ...

    async def patch_status(
        self, plural: str, namespace: str, name: str, status: Mapping[str, Any]
    ) -> None: ...

    async def create_secret(self, namespace: str, body: Mapping[str, Any]) -> RawBody: ...

    async def read_secret(self, namespace: str, name: str) -> RawBody: ...

    async def delete_secret(self, namespace: str, name: str, *, uid: str | None = None) -> None: ...

    async def create_event(self, namespace: str, body: Mapping[str, Any]) -> RawBody: ...


#: Kube makes those calls as LeaseApi says: mypy checks this assignment (and FakeApi's in
#: :func:`cluster_of`).
KUBE_CALLS: type[LeaseApi] = Kube


@dataclass
class FakeApi:
    """The API calls the lease handlers make, over Secrets and lease statuses in memory."""

    pool_spec: dict[str, Any]
    secrets: dict[str, RawBody] = field(default_factory=dict)
    statuses: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: The phase of each status patch, by lease, in order.
    phases: dict[str, list[str]] = field(default_factory=dict)
    #: What creating a Secret raises, as an API server that refuses it would.
    secret_error: Exception | None = None
    #: What the next Bound status write raises, once.
    bound_error: Exception | None = None
    uids: int = 0
    #: The pools read, by name, in order.
    pools_read: list[str] = field(default_factory=list)
    #: The leases a LIST of AgentLeases shows, by name.
    listed: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: The namespaces AgentLeases were listed in, in order.
    lists: list[str] = field(default_factory=list)
    #: The Events created, in order.
    events: list[dict[str, Any]] = field(default_factory=list)

    async def list_custom(self, plural: str, namespace: str) -> list[RawBody]:
        assert plural == "agentleases"
        self.lists.append(namespace)
        return [raw_body(lease) for lease in self.listed.values()]

    async def get_custom(self, plural: str, namespace: str, name: str) -> RawBody:
        assert plural == "agentpools"
        self.pools_read.append(name)
        return {"metadata": {"name": name, "namespace": namespace}, "spec": self.pool_spec}

    async def patch_status(
        self, plural: str, namespace: str, name: str, status: Mapping[str, Any]
    ) -> None:
        self.phases.setdefault(name, []).append(status.get("phase", ""))
        if status.get("phase") == "Bound" and self.bound_error is not None:
            error, self.bound_error = self.bound_error, None
            raise error
        stored = self.statuses.setdefault(name, {})
        for key, value in status.items():
            if value is None:
                stored.pop(key, None)
            else:
                stored[key] = value

    async def create_secret(self, namespace: str, body: Mapping[str, Any]) -> RawBody:
        name = str(body["metadata"]["name"])
        if self.secret_error is not None:
            raise self.secret_error
        if name in self.secrets:
            raise Conflict(f"secrets: {name} exists")
        self.uids += 1
        stored = raw_body({**body, "metadata": {**body["metadata"], "uid": f"secret-{self.uids}"}})
        self.secrets[name] = stored
        return stored

    async def read_secret(self, namespace: str, name: str) -> RawBody:
        if name not in self.secrets:
            raise ObjectNotFound(f"secrets: {name}")
        return self.secrets[name]

    async def delete_secret(self, namespace: str, name: str, *, uid: str | None = None) -> None:
        found = self.secrets.get(name)
        if found is not None and uid in (None, found["metadata"]["uid"]):
            del self.secrets[name]

    async def create_event(self, namespace: str, body: Mapping[str, Any]) -> RawBody:
        self.events.append(dict(body))
        return raw_body(body)

    def token(self, lease: str) -> str:
        secret = self.secrets[f"{lease}-lease-token"]
        return base64.b64decode(secret["data"]["token"]).decode()


@dataclass
class Cluster:
    """A pool of fake agents served by a runtime whose API is a :class:`FakeApi`."""

    runtime: Runtime
    api: FakeApi
    broker: Broker
    agents: dict[str, FakeAgent]

    def agent_view(self, name: str) -> ObservedAgent:
        return next(agent for agent in self.broker.agents() if agent.name == name)

    def idle(self) -> set[str]:
        return {
            a.name
            for a in self.broker.agents()
            if not a.busy and not a.lost and not a.reset_failed and not a.deleting
        }

    def posted_events(self) -> list[tuple[str, str]]:
        """(reason, message) of every Event the handlers wrote so far, a series' once a
        window."""
        return [(event["reason"], event["message"]) for event in self.api.events]


def kopf_context() -> posting.K8sEventQueue:
    """The context kopf gives its handlers, so that kopf.event works; the Events posted."""
    queue: posting.K8sEventQueue = asyncio.Queue()
    posting.settings_var.set(OperatorSettings())
    posting.event_queue_var.set(queue)
    posting.event_queue_loop_var.set(asyncio.get_running_loop())
    return queue


async def serve_agents(count: int, port: int) -> AsyncIterator[dict[str, FakeAgent]]:
    """``count`` fake agents on 127.0.0.1, 127.0.0.2, ... at ``port``."""
    agents: dict[str, FakeAgent] = {}
    runners: list[web.AppRunner] = []
    for index in range(count):
        agent = FakeAgent(name=f"p-{index}", host=f"127.0.0.{index + 1}")
        app = web.Application()
        app.router.add_post("/bind", agent.bind)
        app.router.add_post("/unbind", agent.unbind)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, agent.host, port).start()
        agents[agent.name] = agent
        runners.append(runner)
    try:
        yield agents
    finally:
        for runner in runners:
            await runner.cleanup()


async def cluster_of(
    agents: dict[str, FakeAgent], port: int, client: AgentClient
) -> AsyncIterator[Cluster]:
    api = FakeApi(pool_spec={"image": "agent:1", "minSize": len(agents)})
    answers: LeaseApi = api
    policy = PoolPolicy(min_size=len(agents), max_size=len(agents), port=port)
    broker = Broker("p", policy)
    broker.update_agents(
        [
            ObservedAgent(name=a.name, created_at=0.0, ready=True, ready_at=1.0, ip=a.host)
            for a in agents.values()
        ]
    )
    clock: Clock = LoopClock()
    # The fake answers as Kube does (held to LeaseApi, as Kube is), though it is no Kube.
    runtime = Runtime(kube=cast(Kube, answers), agents=client, clock=clock)
    handle = PoolHandle(
        namespace=NAMESPACE, name="p", broker=broker, port=port, wake=asyncio.Event()
    )
    handle.token = POOL_TOKEN
    runtime.pools.serve(handle)
    yield Cluster(runtime, api, broker, agents)


def lease_body(name: str, **spec: Any) -> kopf.Body:
    raw: dict[str, Any] = {
        "apiVersion": "agentpool.dev/v1alpha1",
        "kind": "AgentLease",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}", "generation": 1},
        "spec": {"poolRef": {"name": "p"}, **spec},
    }
    # kopf's RawBody names no metadata.generation, which the handlers read.
    return kopf.Body(cast(kopf.RawBody, raw))


def made_again(body: kopf.Body, uid: str) -> kopf.Body:
    """A lease of the same name and spec as ``body``, made again: another object, another uid,
    no status yet."""
    raw = json.loads(json.dumps(dict(body)))
    raw["metadata"]["uid"] = uid
    raw.pop("status", None)
    return kopf.Body(raw)


def update_spec(body: kopf.Body, **spec: Any) -> None:
    """The lease's spec changes as kopf's watch would show it."""
    raw = json.loads(json.dumps(dict(body)))
    raw["spec"].update(spec)
    raw["metadata"]["generation"] += 1
    body._replace_with(raw)


@dataclass
class LeaseRun:
    """One lease as the operator's watch shows it to the lease handler: made, changed, deleted."""

    cluster: Cluster
    body: kopf.Body
    task: asyncio.Task[None]

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    async def update(self, **spec: Any) -> None:
        """The holder changed the lease's spec (renewed it, say)."""
        update_spec(self.body, **spec)
        await event(self.cluster, "MODIFIED", self.body)

    async def delete(self) -> None:
        """The lease is deleted: the watch says so, and the handler gives its agent back."""
        await event(self.cluster, "DELETED", self.body)


async def event(cluster: Cluster, kind: str, body: kopf.Body) -> None:
    await leases.lease_event(
        cluster.runtime, type=kind, body=body, name=body["metadata"]["name"], namespace=NAMESPACE
    )


async def start_lease(cluster: Cluster, body: kopf.Body) -> LeaseRun:
    """The lease appears on the watch; its task starts."""
    await event(cluster, "ADDED", body)
    entry = cluster.runtime.leases.tasks[(NAMESPACE, body["metadata"]["name"])]
    return LeaseRun(cluster, body, entry.task)


async def until(predicate: Callable[[], T | None], message: str, timeout: float = 30.0) -> T:
    """What ``predicate()`` gives once it is truthy; fails saying ``message`` past a deadline.

    The deadline is real time, not the loop's: on looptime's fake time each poll moves the loop
    on at once, while what is waited for is often real I/O (an agent's answer)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := predicate():
            return found
        await asyncio.sleep(0.02)
    raise AssertionError(f"waited {timeout:g}s for {message}")
