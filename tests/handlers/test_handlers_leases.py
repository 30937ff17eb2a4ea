"""A lease's binding as the operator drives it: its own token in its own Secret, handed to its
agent before the lease says Bound, moved on renewal, taken back (unbind, Secret gone) before the
agent returns; and an agent that cannot bind fails the lease without the pool's token leaving.

The real lease handlers run against agents that speak the binding's side of the protocol, a
real broker, and an API of Secrets and statuses in memory. The same promises against real SDK
agents on a cluster are in ``tests/integration/test_leases_binding.py``.

The handlers' clock runs with the event loop's, so the tests that wait for a term, a retry or a
checkout timeout to pass are marked ``looptime``: those seconds pass on fake loop time, while
the agents' HTTP answers still come over real sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import socket
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from types import SimpleNamespace

import aiohttp
import kopf
import pytest
from leasefakes import (
    NAMESPACE,
    POOL_TOKEN,
    Cluster,
    FakeAgent,
    cluster_of,
    event,
    lease_body,
    made_again,
    serve_agents,
    start_lease,
    until,
)

from agentpool.agent import Agent
from agentpool.agent.server import AgentServer
from agentpool.agent.settings import Settings
from agentpool.api.conditions import format_micro_time, format_time
from agentpool.api.leases import MAX_CONTEXT_BYTES
from agentpool.handlers import leases, pools
from agentpool.io.agents import AgentClient
from agentpool.pool.manifests import lease_token_secret
from agentpool.pool.pods import epoch
from clocks import LoopClock

CONTEXT = {"session": "s-42", "user": {"id": 7}}
REACH = ("agent", "endpoint", "tokenSecretRef")


@pytest.fixture
def port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
async def cluster(port: int) -> AsyncIterator[Cluster]:
    async for agents in serve_agents(2, port):
        async with AgentClient() as client:
            async for built in cluster_of(agents, port, client):
                yield built


def status(cluster: Cluster, lease: str) -> dict[str, object]:
    return cluster.api.statuses.get(lease, {})


def phase(cluster: Cluster, lease: str) -> object:
    return status(cluster, lease).get("phase")


def holder(cluster: Cluster, lease: str) -> FakeAgent:
    return cluster.agents[str(status(cluster, lease)["agent"])]


def expires_by(cluster: Cluster, lease: str, expire_time: str) -> bool:
    """The lease's status says it expires at ``expire_time`` or later."""
    return str(status(cluster, lease)["expireTime"]) >= expire_time


async def bound(cluster: Cluster, lease: str) -> FakeAgent:
    await until(lambda: phase(cluster, lease) == "Bound", f"lease {lease} Bound")
    return holder(cluster, lease)


async def test_a_bound_lease_names_a_secret_of_its_own_holding_the_token_its_agent_got(
    cluster: Cluster,
) -> None:
    """The lease's token is minted, kept in <lease>-lease-token (owned by the lease) and
    handed by POST /bind to one agent with the lease's context, both before the lease says
    Bound; a lease served at once is never Pending, and its pool, served already, is not read
    again. The status names that Secret, never the pool's, and no status or Event holds either
    token."""
    body = lease_body("chat", ttlSeconds=60, context=CONTEXT)
    lease = await start_lease(cluster, body)
    agent = await bound(cluster, "chat")
    token = cluster.api.token("chat")
    assert token != POOL_TOKEN
    assert cluster.api.phases["chat"] == ["Bound"]
    assert cluster.api.pools_read == []
    assert agent.bound == {
        "lease": "chat",
        "token": token,
        "expireTime": status(cluster, "chat")["expireTime"],
        "context": CONTEXT,
    }
    [other] = [a for a in cluster.agents.values() if a is not agent]
    assert other.calls == []
    assert status(cluster, "chat")["tokenSecretRef"] == {"name": "chat-lease-token", "key": "token"}
    owner = cluster.api.secrets["chat-lease-token"]["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("AgentLease", "uid-chat", True)
    shown = json.dumps([cluster.api.statuses, cluster.posted_events()])
    assert token not in shown
    assert POOL_TOKEN not in shown
    await lease.delete()
    await lease.task


async def test_a_deleted_lease_is_unbound_before_its_agent_returns_and_writes_nothing(
    cluster: Cluster,
) -> None:
    """Deleting the lease unbinds its agent, then the agent is idle in the pool again. The
    lease is gone already (it has no finalizer): nothing more is written, no status and no
    Event, and its Secret is left to garbage collection, which its owner reference asks for."""
    body = lease_body("chat", ttlSeconds=60)
    lease = await start_lease(cluster, body)
    agent = await bound(cluster, "chat")
    assert agent.name not in cluster.idle()
    await lease.delete()
    await lease.task
    assert agent.paths() == ["bind", "unbind"]
    assert agent.calls[1][1] == {"lease": "chat"}
    assert cluster.api.phases["chat"] == ["Bound"]
    ((reason, message),) = cluster.posted_events()
    assert reason == "LeaseBound"
    assert f"Bound agent {agent.name} to lease chat until " in message
    pool = cluster.api.events[0]["involvedObject"]
    assert (pool["kind"], pool["namespace"], pool["name"]) == ("AgentPool", NAMESPACE, "p")
    owner = cluster.api.secrets["chat-lease-token"]["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("AgentLease", "chat", "uid-chat")
    assert cluster.idle() == set(cluster.agents)
    assert cluster.runtime.leases.tasks == {}


@pytest.mark.looptime
async def test_a_lease_past_its_ttl_is_unbound_and_expires(cluster: Cluster) -> None:
    """A lease nobody renews expires: its agent is unbound, the Secret deleted, the status
    Expired with nothing left to reach the agent with, and the agent idle again."""
    lease = await start_lease(cluster, lease_body("brief", ttlSeconds=1))
    agent = await bound(cluster, "brief")
    await lease.task
    assert phase(cluster, "brief") == "Expired"
    assert agent.paths() == ["bind", "unbind"]
    assert "brief-lease-token" not in cluster.api.secrets
    assert [field for field in REACH if field in status(cluster, "brief")] == []
    assert cluster.idle() == set(cluster.agents)


@pytest.mark.looptime
async def test_a_renewed_lease_keeps_its_agent_past_the_first_ttl(cluster: Cluster) -> None:
    """Each renewal posts /bind again with the later expiry (same token and context) and moves
    status.expireTime; the lease holds past its first ttl, then expires once renewals stop."""
    clock = cluster.runtime.clock
    body = lease_body("chat", ttlSeconds=3, context=CONTEXT)
    lease = await start_lease(cluster, body)
    agent = await bound(cluster, "chat")
    first = epoch(str(status(cluster, "chat")["expireTime"]))
    assert first is not None
    while clock.now() < first + 1.5:
        renewed = clock.now()
        await lease.update(renewTime=format_micro_time(renewed))
        expected = format_time(renewed + 3)
        await until(functools.partial(expires_by, cluster, "chat", expected), "the renewal")
        assert phase(cluster, "chat") == "Bound"
        assert agent.bound is not None
        assert agent.bound["expireTime"] >= expected
        # The holder renews every half second.
        await clock.sleep(0.5)
    moved = epoch(str(status(cluster, "chat")["expireTime"]))
    assert moved is not None
    assert moved > first
    binds = [body for path, body in agent.calls if path == "bind"]
    assert {(b["token"], json.dumps(b["context"])) for b in binds} == {
        (cluster.api.token("chat"), json.dumps(CONTEXT))
    }
    assert binds[-1]["expireTime"] == status(cluster, "chat")["expireTime"]
    await lease.task
    assert phase(cluster, "chat") == "Expired"
    assert agent.paths()[-1] == "unbind"


@pytest.mark.parametrize("answer", [404, 405, 501])
async def test_an_agent_without_bind_fails_the_lease_and_goes_back_untouched(
    cluster: Cluster, answer: int
) -> None:
    """An agent that does not serve /bind fails the lease as BindUnsupported, naming the agent
    and the pool; its Secret goes, nothing is unbound, and the agent is idle with no use
    counted. The pool's token is never handed out instead."""
    for agent in cluster.agents.values():
        agent.bind_answer = answer
    lease = await start_lease(cluster, lease_body("chat", ttlSeconds=60))
    await lease.task
    found = status(cluster, "chat")
    assert (found["phase"], found["reason"]) == ("Failed", "BindUnsupported")
    [agent] = [a for a in cluster.agents.values() if a.calls]
    assert f"agent {agent.name} of pool p" in str(found["message"])
    assert agent.paths() == ["bind"]
    assert cluster.api.secrets == {}
    assert [field for field in REACH if field in found] == []
    assert cluster.idle() == set(cluster.agents)
    assert cluster.agent_view(agent.name).uses == 0


async def test_an_agent_whose_bind_fails_fails_the_lease(cluster: Cluster) -> None:
    """An agent whose bind hook raised (500 BindFailed) fails the lease with its message; the
    agent, unbound, goes back to the pool."""
    for agent in cluster.agents.values():
        agent.bind_answer = 500
    lease = await start_lease(cluster, lease_body("chat", ttlSeconds=60))
    await lease.task
    found = status(cluster, "chat")
    assert (found["phase"], found["reason"]) == ("Failed", "BindFailed")
    assert "the bind hook raised" in str(found["message"])
    assert cluster.api.secrets == {}
    assert cluster.idle() == set(cluster.agents)


async def test_an_agent_that_fails_to_unbind_is_retired(cluster: Cluster) -> None:
    """An agent whose unbind (or reset) failed may still hold the lease's token or context: it
    is retired, never handed to the next holder."""
    body = lease_body("chat", ttlSeconds=60)
    lease = await start_lease(cluster, body)
    agent = await bound(cluster, "chat")
    agent.unbind_answer = 500
    await lease.delete()
    await lease.task
    assert cluster.agent_view(agent.name).reset_failed
    assert cluster.idle() == set(cluster.agents) - {agent.name}


async def test_a_context_over_the_limit_fails_the_lease_before_it_takes_an_agent(
    cluster: Cluster,
) -> None:
    """A context over 64 KiB as compact JSON fails the lease as ContextTooLarge, saying its size
    and the limit, and no agent is taken or called."""
    big = {"blob": "x" * MAX_CONTEXT_BYTES}
    lease = await start_lease(cluster, lease_body("big", ttlSeconds=60, context=big))
    await lease.task
    found = status(cluster, "big")
    assert (found["phase"], found["reason"]) == ("Failed", "ContextTooLarge")
    assert str(MAX_CONTEXT_BYTES) in str(found["message"])
    assert [a.calls for a in cluster.agents.values()] == [[], []]
    assert cluster.idle() == set(cluster.agents)


async def test_a_lease_deleted_while_its_bind_is_in_flight_leaves_no_agent_bound(
    cluster: Cluster,
) -> None:
    """The deletion waits for the bind in flight to answer, then unbinds: the agent gets /bind
    then /unbind, the lease is never said Bound, and the agent is idle in the pool."""
    gate = asyncio.Event()
    for agent in cluster.agents.values():
        agent.bind_gate = gate
    body = lease_body("chat", ttlSeconds=60)
    lease = await start_lease(cluster, body)
    agent = await until(
        lambda: next((a for a in cluster.agents.values() if a.calls), None), "the /bind"
    )
    release = asyncio.create_task(lease.delete())
    lock = cluster.runtime.leases.locks[("ns", "chat")]
    await until(lambda: lock.locked() and lock._waiters, "the deletion to wait for the bind")
    gate.set()
    await asyncio.gather(release, lease.task)
    assert agent.paths() == ["bind", "unbind"]
    assert agent.bound is None
    assert phase(cluster, "chat") != "Bound"
    assert cluster.idle() == set(cluster.agents)


@pytest.mark.looptime
async def test_a_lease_whose_bound_status_write_failed_keeps_one_agent_and_gives_it_back(
    cluster: Cluster,
) -> None:
    """The API server refuses the Bound status once: the lease's next try binds the same agent
    again rather than a second one beside it, and once the lease is deleted every agent is idle
    in the pool, none left bound."""
    cluster.api.bound_error = RuntimeError("the API server refused the write")
    lease = await start_lease(cluster, lease_body("chat", ttlSeconds=60))
    await until(lambda: phase(cluster, "chat") == "Bound", "the lease Bound after a retry")
    used = [a for a in cluster.agents.values() if a.calls]
    assert [a.name for a in used] == [status(cluster, "chat")["agent"]]
    assert len(cluster.idle()) == len(cluster.agents) - 1
    await lease.delete()
    await lease.task
    assert used[0].bound is None
    assert cluster.idle() == set(cluster.agents)


async def test_a_lease_bound_before_a_restart_keeps_its_agent_token_and_times(
    cluster: Cluster,
) -> None:
    """A restarted operator's lease takes up the agent its pool loop gave back: no new bind
    (the agent holds the lease's token already), the same bound time, and a renewal posts /bind
    again with the token from the lease's Secret."""
    agent = cluster.agents["p-0"]
    token = "lease-token-from-before"
    secret = lease_token_secret(
        {"kind": "AgentLease", "metadata": {"name": "chat", "namespace": "ns", "uid": "uid-chat"}},
        "p",
        token,
    )
    await cluster.api.create_secret("ns", secret)
    now = cluster.runtime.clock.now()
    before = {
        "phase": "Bound",
        "agent": agent.name,
        "endpoint": f"http://{agent.host}:0",
        "tokenSecretRef": {"name": "chat-lease-token", "key": "token"},
        "boundTime": format_time(now - 2),
        "expireTime": format_time(now - 2 + 60),
        "conditions": [{"type": "Bound", "status": "True"}],
    }
    cluster.api.statuses["chat"] = dict(before)
    restored = cluster.broker.restore_busy(agent.name, None)
    assert restored is not None
    cluster.runtime.leases.restored[("ns", "chat")] = restored
    body = lease_body("chat", ttlSeconds=60)
    body._replace_with({**dict(body), "status": before})
    lease = await start_lease(cluster, body)
    await until(lambda: ("ns", "chat") in cluster.runtime.leases.held, "the agent held again")
    assert agent.calls == []
    renewed = cluster.runtime.clock.now()
    await lease.update(renewTime=format_micro_time(renewed))
    await until(lambda: agent.calls, "the renewal's /bind")
    [(path, sent)] = agent.calls
    assert (path, sent["lease"], sent["token"]) == ("bind", "chat", token)
    assert sent["expireTime"] == format_time(renewed + 60)
    await until(
        lambda: status(cluster, "chat")["expireTime"] == sent["expireTime"], "expireTime moved"
    )
    assert status(cluster, "chat")["boundTime"] == before["boundTime"]
    await lease.delete()
    await lease.task
    assert agent.paths() == ["bind", "unbind"]


async def test_a_lease_that_waits_for_an_agent_says_pending_first(cluster: Cluster) -> None:
    """With every agent leased, a third lease is Pending until one is released, then Bound."""
    bodies = [lease_body(name, ttlSeconds=60) for name in ("a", "b", "c")]
    held = [await start_lease(cluster, body) for body in bodies[:2]]
    first = await bound(cluster, "a")
    await bound(cluster, "b")
    held.append(await start_lease(cluster, bodies[2]))
    await until(lambda: phase(cluster, "c") == "Pending", "lease c Pending")
    await held[0].delete()
    assert await bound(cluster, "c") is first
    assert cluster.api.phases["c"] == ["Pending", "Bound"]
    for lease in held:
        await lease.delete()
        await lease.task


async def test_a_secret_that_cannot_be_written_leaves_no_agent_bound_or_held(
    cluster: Cluster,
) -> None:
    """The API server refuses the lease's Secret while its agent takes the bind: the agent is
    unbound at once and goes out of the pool's hands (retired, as one that may hold the token),
    the lease is not Bound, and its task tries again (on the other agent) until the lease goes."""
    cluster.api.secret_error = RuntimeError("the API server refused the Secret")
    lease = await start_lease(cluster, lease_body("chat", ttlSeconds=60))
    retired = await until(
        lambda: [a for a in cluster.agents.values() if cluster.agent_view(a.name).reset_failed],
        "an agent retired",
    )
    agent = retired[0]
    await until(lambda: agent.paths() == ["bind", "unbind"], "the agent unbound")
    assert agent.bound is None
    assert phase(cluster, "chat") != "Bound"
    assert not cluster.agent_view(agent.name).busy
    assert not lease.task.done()
    await lease.delete()
    await lease.task
    assert [a.bound for a in cluster.agents.values()] == [None, None]


@pytest.mark.looptime
async def test_lease_events_turned_off_post_none(cluster: Cluster) -> None:
    """With lease Events off (``agentpool run --no-lease-events``), a lease bound and expired
    posts no Event: one API write fewer each, and its status says all the same."""
    cluster.runtime.settings = dataclasses.replace(
        cluster.runtime.settings,
        leases=dataclasses.replace(cluster.runtime.settings.leases, events=False),
    )
    lease = await start_lease(cluster, lease_body("brief", ttlSeconds=1))
    await bound(cluster, "brief")
    await lease.task
    assert cluster.api.phases["brief"] == ["Bound", "Expired"]
    assert cluster.posted_events() == []


@pytest.mark.looptime
async def test_a_lease_that_ended_and_went_leaves_nothing_behind(cluster: Cluster) -> None:
    """An operator serves leases for months: once a lease has expired, its Expired status has
    come back on the watch and it is deleted, the operator keeps nothing of it (no task, no
    copy of the lease, no lock or wake-up)."""
    lease = await start_lease(cluster, lease_body("brief", ttlSeconds=1))
    await bound(cluster, "brief")
    await lease.task
    lease.body._replace_with({**dict(lease.body), "status": dict(status(cluster, "brief"))})
    await event(cluster, "MODIFIED", lease.body)
    await lease.delete()
    leases = cluster.runtime.leases
    assert (leases.tasks, leases.latest, leases.locks, leases.wakes) == ({}, {}, {}, {})
    assert cluster.idle() == set(cluster.agents)


@pytest.mark.parametrize(
    "reason",
    [kopf.DaemonStoppingReason.OPERATOR_PAUSING, kopf.DaemonStoppingReason.OPERATOR_EXITING],
    ids=["pauses", "exits"],
)
@pytest.mark.looptime
async def test_a_replica_that_pauses_or_exits_leaves_its_leases_bound_to_the_next(
    cluster: Cluster, reason: kopf.DaemonStoppingReason
) -> None:
    """kopf pauses this replica (a peer of higher priority acts) or makes it exit, and stops
    its pool loops and its watches: its lease tasks end at once, as they would no longer see
    their holders' renewals. A lease whose term then passes is the next replica's to expire:
    this one writes no status, unbinds nothing and deletes no Secret, and the agent stays held
    for the lease, never handed to anyone else."""
    lease = await start_lease(cluster, lease_body("brief", ttlSeconds=1))
    agent = await bound(cluster, "brief")
    handle = cluster.runtime.pools.get(("ns", "p"))
    assert handle is not None
    pools.end_pool(cluster.runtime, handle, SimpleNamespace(reason=reason))  # type: ignore[arg-type]
    async with asyncio.timeout(30):
        await lease.task
    # Past the term the lease was bound for, it is still Bound as this replica left it.
    expires = epoch(str(status(cluster, "brief")["expireTime"]))
    assert expires is not None
    await until(lambda: cluster.runtime.clock.now() > expires, "the lease's term")
    assert cluster.api.phases["brief"] == ["Bound"]
    assert agent.paths() == ["bind"]
    assert "brief-lease-token" in cluster.api.secrets
    assert agent.name not in cluster.idle()
    assert cluster.runtime.leases.restored[("ns", "brief")].agent == agent.name


async def test_a_lease_deleted_in_a_gap_of_the_watch_is_released_by_the_next_sweep(
    cluster: Cluster,
) -> None:
    """The watch missed a lease's deletion (it broke, and kopf's listing after it names no
    deleted object): the next sweep of the leases finds it gone and releases its agent as the
    deletion would have, long before its term, writing nothing to it. A lease still there
    keeps its agent."""
    lease = await start_lease(cluster, lease_body("chat", ttlSeconds=3600))
    kept = await start_lease(cluster, lease_body("kept", ttlSeconds=3600))
    agent, other = await bound(cluster, "chat"), await bound(cluster, "kept")
    cluster.api.listed = {"kept": dict(kept.body)}
    await leases.sweep_once(cluster.runtime)
    async with asyncio.timeout(30):
        await lease.task
    assert cluster.api.lists == ["ns"]
    assert agent.paths() == ["bind", "unbind"]
    assert agent.name in cluster.idle()
    assert cluster.api.phases["chat"] == ["Bound"]
    assert other.paths() == ["bind"]
    assert not cluster.runtime.leases.tasks[("ns", "kept")].task.done()
    await kept.delete()
    await kept.task
    assert cluster.idle() == set(cluster.agents)


async def test_a_lease_made_again_under_a_name_whose_deletion_was_missed_is_a_new_lease(
    cluster: Cluster,
) -> None:
    """A lease is deleted and made again under its name while the watch is away: the watch
    shows only the new one. The old lease's agent is unbound (its client may still hold the
    old token), and the new lease is bound anew, with a token of its own in a Secret it owns;
    the old one's deletion, seen after, leaves the new one be."""
    first = await start_lease(cluster, lease_body("chat", ttlSeconds=3600))
    old = await bound(cluster, "chat")
    old_token = cluster.api.token("chat")
    # The old lease's Secret and status go with it.
    del cluster.api.secrets["chat-lease-token"]
    del cluster.api.statuses["chat"]
    await event(cluster, "ADDED", made_again(first.body, "uid-chat-2"))
    async with asyncio.timeout(30):
        await first.task
    assert old.calls[1] == ("unbind", {"lease": "chat"})
    agent = await bound(cluster, "chat")
    token = cluster.api.token("chat")
    assert token != old_token
    assert agent.bound is not None
    assert agent.bound["token"] == token
    owner = cluster.api.secrets["chat-lease-token"]["metadata"]["ownerReferences"][0]
    assert owner["uid"] == "uid-chat-2"
    assert len(cluster.idle()) == len(cluster.agents) - 1
    # The old lease's deletion, late (kopf queues each object's events apart), ends nothing.
    await event(cluster, "DELETED", first.body)
    assert agent.bound is not None
    assert not cluster.runtime.leases.tasks[("ns", "chat")].task.done()
    assert len(cluster.idle()) == len(cluster.agents) - 1


@pytest.mark.looptime
async def test_a_lease_seen_by_a_paused_replica_is_left_to_the_peer_that_acts(
    cluster: Cluster,
) -> None:
    """An event reaches a replica just paused (kopf stops its watches, but one already in hand
    is handled): while paused it serves no pool and writes nothing for the lease, past the
    lease's checkout timeout too, as the acting peer serves it; once it acts again (its pool
    served), it binds the lease."""
    handle = cluster.runtime.pools.get(("ns", "p"))
    assert handle is not None
    pools.end_pool(
        cluster.runtime,
        handle,
        SimpleNamespace(reason=kopf.DaemonStoppingReason.OPERATOR_PAUSING),  # type: ignore[arg-type]
    )
    lease = await start_lease(cluster, lease_body("late", ttlSeconds=60, checkoutTimeoutSeconds=1))
    done, _ = await asyncio.wait({lease.task}, timeout=2.5)
    assert not done
    assert "late" not in cluster.api.phases
    assert [a.name for a in cluster.agents.values() if a.calls] == []
    cluster.runtime.pools.serve(handle)
    cluster.runtime.leases.resume()
    await bound(cluster, "late")
    await lease.delete()
    await lease.task


@contextlib.asynccontextmanager
async def sdk_agent(port: int, name: str = "p-0") -> AsyncIterator[FakeAgent]:
    """An agent on the SDK's own server at 127.0.0.1:``port``, /bind and /unbind as the SDK
    answers them; the FakeAgent only names it (its address) for :func:`cluster_of`."""
    started = asyncio.Event()

    async def startup() -> None:
        started.set()

    settings = Settings(host="127.0.0.1", port=port, token=POOL_TOKEN)
    clock = LoopClock()
    server = AgentServer(
        Agent(lambda state, item, context: item, startup=startup, name=name),
        settings,
        clock=lambda: datetime.fromtimestamp(clock.now(), UTC),
    )
    stop = asyncio.Event()
    serving = asyncio.create_task(server.serve_until(stop))
    try:
        await until(started.is_set, "the SDK agent started")
        yield FakeAgent(name=name, host="127.0.0.1")
    finally:
        stop.set()
        await serving


async def lease_status_code(port: int, token: str) -> int:
    """What the agent answers ``GET /status`` with ``token``, as a lease's client calls it."""
    headers = {"Authorization": f"Bearer {token}"}
    url = f"http://127.0.0.1:{port}/status"
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as answer:
        return answer.status


@pytest.mark.parametrize("bound_before", [False, True])
async def test_a_lease_bound_again_after_a_restart_mid_bind_opens_its_agent_with_its_secret(
    port: int, bound_before: bool
) -> None:
    """The operator restarted mid-bind: the lease's Secret is there with its token, but the
    lease never said Bound. Bound now, to an agent on the SDK (a fresh one, or the one the
    first bind reached, still bound with the Secret's token), the agent accepts the token in
    the Secret, the one its client reads, until the lease is deleted."""
    async with sdk_agent(port) as agent, AgentClient() as client:
        async for cluster in cluster_of({agent.name: agent}, port, client):
            body = lease_body("chat", ttlSeconds=60)
            token = "lease-token-from-before"
            await cluster.api.create_secret("ns", lease_token_secret(dict(body), "p", token))
            if bound_before:
                expire_time = format_time(cluster.runtime.clock.now() + 60)
                answer = await client.bind(
                    f"http://{agent.host}:{port}",
                    POOL_TOKEN,
                    lease="chat",
                    lease_token=token,
                    expire_time=expire_time,
                    context=None,
                    timeout=10,
                )
                assert answer.ok
            lease = await start_lease(cluster, body)
            await bound(cluster, "chat")
            assert cluster.api.token("chat") == token
            assert await lease_status_code(port, token) == 200
            await lease.delete()
            await lease.task
            assert await lease_status_code(port, token) == 401


async def test_an_agent_that_cannot_be_bound_again_with_the_secrets_token_is_retired(
    cluster: Cluster,
) -> None:
    """After a restart mid-bind, an agent that took the fresh token but refuses the unbind
    needed to take the Secret's instead fails the lease as BindFailed, saying so; it is
    retired (it may hold either token), the Secret goes, and the other agent stays idle."""
    body = lease_body("chat", ttlSeconds=60)
    await cluster.api.create_secret("ns", lease_token_secret(dict(body), "p", "from-before"))
    for agent in cluster.agents.values():
        agent.unbind_answer = 500
    lease = await start_lease(cluster, body)
    await lease.task
    found = status(cluster, "chat")
    assert (found["phase"], found["reason"]) == ("Failed", "BindFailed")
    assert "token in the lease's Secret" in str(found["message"])
    assert cluster.api.secrets == {}
    [used] = [agent for agent in cluster.agents.values() if agent.calls]
    assert used.paths() == ["bind", "unbind"]
    assert cluster.agent_view(used.name).reset_failed
    assert cluster.idle() == set(cluster.agents) - {used.name}
