"""A restarted operator takes back what its agents were doing before it hands any of them out."""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest

from agentpool.api import AgentPoolSpec
from agentpool.api.pools import Protocol
from agentpool.broker import Broker
from agentpool.handlers.listings import Listings
from agentpool.handlers.recovery import restore_held_agents
from agentpool.handlers.runtime import LeaseAgents
from agentpool.io.agents import AgentStatus
from agentpool.pool import ObservedAgent, PoolPolicy
from agentpool.pool.checkin import CheckoutTimedOut
from agentpool.settings import OperatorSettings, RecoverySettings


class Agents:
    """``GET /status`` as each agent answers it: an AgentStatus, or None for no answer in time."""

    def __init__(self, answers: dict[str, AgentStatus | None]) -> None:
        self.answers = answers
        self.unbinds: list[tuple[str, str]] = []
        self.unbind_answer = True
        self.unbinding = asyncio.Event()
        self.asked = asyncio.Event()

    async def status(self, endpoint: str, token: str, *, timeout: float = 5.0) -> Any:
        return self.answers[host_of(endpoint)]

    async def unbind(self, endpoint: str, token: str, *, lease: str, timeout: float) -> bool:
        self.unbinds.append((host_of(endpoint), lease))
        self.asked.set()
        await self.unbinding.wait()
        return self.unbind_answer


def host_of(endpoint: str) -> str:
    return endpoint.removeprefix("http://").rsplit(":", 1)[0]


class Kube:
    def __init__(self) -> None:
        self.leases: list[dict[str, Any]] = []

    async def list_custom(self, plural: str, namespace: str) -> list[dict[str, Any]]:
        assert plural == "agentleases"
        return self.leases


def bound_lease(name: str, agent: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"poolRef": {"name": "p"}},
        "status": {"phase": "Bound", "agent": agent},
    }


def idle(uses: int = 0) -> AgentStatus:
    return AgentStatus(busy=False, current=None, uses=uses, ready=True, draining=False)


def busy(item: str) -> AgentStatus:
    return AgentStatus(busy=True, current=item, uses=1, ready=True, draining=False)


def agent(name: str, ip: str, token_hash: str = "") -> ObservedAgent:
    return ObservedAgent(
        name=name, created_at=900.0, ready=True, ready_at=950.0, ip=ip, token_hash=token_hash
    )


def restart(
    answers: dict[str, AgentStatus | None],
    *,
    old_token: set[str] = frozenset(),
    protocol: Protocol = "Agentpool",
) -> tuple[Any, Any, Agents]:
    """A pool of one agent per answer (named after its address), as a restarted operator sees it;
    the agents at ``old_token`` hold a token the pool no longer has."""
    size = len(answers)
    broker = Broker("p", PoolPolicy(min_size=size, max_size=size, token_hash="new"))
    broker.update_agents(
        [agent(f"pod-{ip}", ip, "old" if ip in old_token else "new") for ip in answers]
    )
    agents = Agents(dict(answers))
    recovery = RecoverySettings(poll_seconds=0.01, silence_seconds=30.0)
    kube = Kube()
    runtime = SimpleNamespace(
        kube=kube,
        listings=Listings(kube),  # type: ignore[arg-type]
        agents=agents,
        leases=LeaseAgents(),
        settings=dataclasses.replace(OperatorSettings(), recovery=recovery),
        restorers=set(),
        status_gate=None,
    )
    handle = SimpleNamespace(
        broker=broker,
        namespace="ns",
        name="p",
        port=8080,
        token="t",
        spec=AgentPoolSpec(protocol=protocol),
    )
    return runtime, handle, agents


async def free_agents(broker: Broker) -> set[str]:
    """The agents a checkout can have now, each held until the end of the call."""
    taken = []
    try:
        while True:
            taken.append(await broker.checkout(timeout=0, holder="probe"))
    except CheckoutTimedOut:
        pass
    names = {checkout.agent for checkout in taken}
    for checkout in taken:
        broker.checkin(checkout, "unused")
    return names


@pytest.mark.parametrize("silent", [None, busy("item-7")], ids=["no answer", "busy"])
async def test_an_agent_that_may_be_busy_is_not_handed_out_after_a_restart(
    silent: AgentStatus | None,
) -> None:
    """An agent that reports an item in progress, or does not answer ``/status`` in time (a
    loaded machine, a slow agent), may still be running an item from before the restart: it is
    held until it reports idle, and only the agents that said they were idle are handed out."""
    runtime, handle, agents = restart({"10.0.0.1": silent, "10.0.0.2": idle()})
    await restore_held_agents(runtime, handle)
    assert await free_agents(handle.broker) == {"pod-10.0.0.2"}
    # Once it answers idle, it goes back to the pool.
    agents.answers["10.0.0.1"] = idle()
    async with asyncio.timeout(10):
        await asyncio.gather(*runtime.restorers)
    assert await free_agents(handle.broker) == {"pod-10.0.0.1", "pod-10.0.0.2"}


async def test_a_silent_agent_with_an_old_token_is_left_to_be_replaced() -> None:
    """An agent started with a token the pool no longer has refuses the restarted operator's
    ``/status``: it is never handed out as it is, so it is not held either, and the reconciler
    may retire it at once instead of after the silence allowed a busy agent."""
    runtime, handle, _ = restart({"10.0.0.1": None, "10.0.0.2": idle()}, old_token={"10.0.0.1"})
    await restore_held_agents(runtime, handle)
    assert not runtime.restorers
    assert {a.name: a.busy for a in handle.broker.agents()} == {
        "pod-10.0.0.1": False,
        "pod-10.0.0.2": False,
    }
    assert await free_agents(handle.broker) == {"pod-10.0.0.2"}


async def test_an_agent_with_several_slots_keeps_one_busy_per_item_it_reports() -> None:
    """After a restart an agent of four slots reporting two items has two slots held and two to
    hand out; each held slot comes back once its own item is done, not when the agent is idle."""
    runtime, handle, agents = restart({"10.0.0.1": idle()})
    handle.broker.update_policy(dataclasses.replace(handle.broker.policy, slots=4))
    agents.answers["10.0.0.1"] = AgentStatus(
        busy=True,
        current="x",
        uses=2,
        ready=True,
        draining=False,
        slots=4,
        busy_slots=2,
        items=("x", "y"),
    )
    await restore_held_agents(runtime, handle)
    assert len(runtime.restorers) == 2
    assert handle.broker.agents()[0].busy_slots == 2
    agents.answers["10.0.0.1"] = dataclasses.replace(
        agents.answers["10.0.0.1"],  # type: ignore[type-var]
        busy_slots=1,
        items=("y",),
    )
    done, _ = await asyncio.wait(
        set(runtime.restorers), timeout=10, return_when=asyncio.FIRST_COMPLETED
    )
    assert len(done) == 1
    assert handle.broker.agents()[0].busy_slots == 1
    agents.answers["10.0.0.1"] = idle(uses=2)
    async with asyncio.timeout(10):
        await asyncio.gather(*runtime.restorers)
    assert handle.broker.agents()[0].busy_slots == 0


async def unbound_before_it_returns(
    runtime: Any, handle: Any, agents: Agents, *, unbound: bool
) -> None:
    """Agent 10.0.0.1, bound to the lease "chat", is asked to unbind and is nobody's until it
    answers; then it is free again if it unbound, retired if not."""
    async with asyncio.timeout(10):
        await agents.asked.wait()
    assert agents.unbinds == [("10.0.0.1", "chat")]
    assert await free_agents(handle.broker) == {"pod-10.0.0.2"}
    agents.unbinding.set()
    async with asyncio.timeout(10):
        await asyncio.gather(*runtime.restorers)
    expected = {"pod-10.0.0.1", "pod-10.0.0.2"} if unbound else {"pod-10.0.0.2"}
    assert await free_agents(handle.broker) == expected


@pytest.mark.parametrize("unbound", [True, False], ids=["unbinds", "fails to unbind"])
async def test_an_agent_bound_to_a_lease_deleted_while_no_operator_ran_is_unbound_first(
    unbound: bool,
) -> None:
    """A lease deleted while the operator was down leaves its agent bound, and its client may
    still hold the token: the restarted operator hands that agent to nobody until it has taken
    the lease back (``POST /unbind``); an agent that fails to unbind is retired, never handed
    out."""
    bound = dataclasses.replace(idle(), lease="chat")
    runtime, handle, agents = restart({"10.0.0.1": bound, "10.0.0.2": idle()})
    agents.unbind_answer = unbound
    await restore_held_agents(runtime, handle)
    await unbound_before_it_returns(runtime, handle, agents, unbound=unbound)


@pytest.mark.parametrize("unbound", [True, False], ids=["unbinds", "fails to unbind"])
async def test_an_agent_silent_at_a_restart_that_later_names_a_gone_lease_is_unbound_first(
    unbound: bool,
) -> None:
    """An agent bound to a lease deleted while no operator ran, too slow to answer the restart's
    ``/status``, is held as a silent one; once it answers idle it still names that lease, whose
    client may hold the token: it is unbound before anyone gets it, and retired when the unbind
    fails, as an agent that answered in time would be."""
    runtime, handle, agents = restart({"10.0.0.1": None, "10.0.0.2": idle()})
    agents.unbind_answer = unbound
    await restore_held_agents(runtime, handle)
    assert await free_agents(handle.broker) == {"pod-10.0.0.2"}
    agents.answers["10.0.0.1"] = dataclasses.replace(idle(), lease="chat")
    await unbound_before_it_returns(runtime, handle, agents, unbound=unbound)


async def test_a_paused_replica_unbinds_no_agent_the_acting_peer_may_have_bound() -> None:
    """A restarted replica holds a silent agent; it is paused, and meanwhile the acting peer
    hands the agent to a lease of its own: when the agent answers idle, naming that lease, the
    paused replica gives it back to its pool without unbinding it."""
    runtime, handle, agents = restart({"10.0.0.1": None, "10.0.0.2": idle()})
    await restore_held_agents(runtime, handle)
    runtime.leases.pause()
    agents.answers["10.0.0.1"] = dataclasses.replace(idle(), lease="the-peers")
    async with asyncio.timeout(10):
        await asyncio.gather(*runtime.restorers)
    assert agents.unbinds == []
    assert await free_agents(handle.broker) == {"pod-10.0.0.1", "pod-10.0.0.2"}


async def test_a_resumed_pool_keeps_parked_agents_of_bound_leases_and_unbinds_the_rest() -> None:
    """This replica was paused while a peer acted: its lease tasks parked their agents. On
    resuming, the agent of a lease still Bound to it stays with it, unasked; the agent of a
    lease the peer ended meanwhile still names it, so it is unbound before anyone gets it; and
    a lease the peer bound anew to another agent gets that one, its parked one going back."""
    runtime, handle, agents = restart(
        {"10.0.0.1": idle(), "10.0.0.2": idle(), "10.0.0.3": idle(), "10.0.0.4": idle()}
    )
    for lease in ("kept", "gone", "moved"):
        checkout = await handle.broker.checkout(timeout=0, holder=f"lease:ns/{lease}")
        runtime.leases.restored[("ns", lease)] = checkout
    kept = runtime.leases.restored[("ns", "kept")]
    gone = runtime.leases.restored[("ns", "gone")].agent
    moved_from = runtime.leases.restored[("ns", "moved")].agent
    [moved_to] = {"pod-10.0.0.1", "pod-10.0.0.2", "pod-10.0.0.3", "pod-10.0.0.4"} - {
        kept.agent,
        gone,
        moved_from,
    }
    agents.answers[kept.ip] = dataclasses.replace(idle(), lease="kept")
    agents.answers[gone.removeprefix("pod-")] = dataclasses.replace(idle(), lease="gone")
    agents.answers[moved_to.removeprefix("pod-")] = dataclasses.replace(idle(), lease="moved")
    runtime.kube.leases = [bound_lease("kept", kept.agent), bound_lease("moved", moved_to)]
    agents.unbinding.set()
    await restore_held_agents(runtime, handle)
    async with asyncio.timeout(10):
        await asyncio.gather(*runtime.restorers)
    assert runtime.leases.restored[("ns", "kept")] is kept
    assert runtime.leases.restored[("ns", "moved")].agent == moved_to
    assert agents.unbinds == [(gone.removeprefix("pod-"), "gone")]
    assert await free_agents(handle.broker) == {gone, moved_from}


class Crowded(Agents):
    """Agents behind a client that can carry ``room`` calls at once: a call beyond that waits
    for a connection past its timeout and comes back with no answer, as a restart of thousands
    of agents did on the operator's shared client."""

    def __init__(self, answers: dict[str, AgentStatus | None], room: int) -> None:
        super().__init__(answers)
        self.room, self.in_flight, self.most = room, 0, 0

    async def status(self, endpoint: str, token: str, *, timeout: float = 5.0) -> Any:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await asyncio.sleep(0)
            return None if self.in_flight > self.room else await super().status(endpoint, token)
        finally:
            self.in_flight -= 1


async def test_a_restart_of_many_pools_asks_only_so_many_agents_at_once() -> None:
    """All pools restart together: their ``/status`` calls are bounded across pools, so an idle
    agent is not taken for silent (and held busy) because the calls before it filled the
    client; each pool hands out its idle agents at once."""
    pools = []
    crowded = Crowded({}, room=3)
    for number in range(4):
        answers = {f"10.0.{number}.{i}": idle() for i in range(5)}
        runtime, handle, _ = restart(answers)
        crowded.answers.update(answers)
        pools.append((runtime, handle))
    gate = asyncio.Semaphore(3)
    for runtime, _ in pools:
        runtime.agents, runtime.status_gate = crowded, gate
    await asyncio.gather(*(restore_held_agents(runtime, handle) for runtime, handle in pools))
    assert crowded.most <= 3
    for runtime, handle in pools:
        assert not runtime.restorers
        assert len(await free_agents(handle.broker)) == 5


async def test_the_bound_comes_from_the_settings_when_the_runtime_has_none() -> None:
    """A runtime without a gate gets one of ``status_concurrency`` calls on first use."""
    runtime, handle, _ = restart({f"10.0.0.{i}": idle() for i in range(6)})
    crowded = Crowded(dict(runtime.agents.answers), room=2)
    runtime.agents = crowded
    runtime.settings = dataclasses.replace(
        runtime.settings,
        recovery=dataclasses.replace(runtime.settings.recovery, status_concurrency=2),
    )
    await restore_held_agents(runtime, handle)
    assert crowded.most <= 2
    assert len(await free_agents(handle.broker)) == 6


async def test_an_http_pools_ready_agents_are_idle_after_a_restart_and_never_asked() -> None:
    """An HTTP pool's agents serve no /status: a restarted operator asks none of them (not even
    those that would say they are busy) and hands out every Ready one, since what they served
    came through the operator that is gone; a Bound lease's agent still goes back to its lease."""
    runtime, handle, agents = restart(
        {"10.0.0.1": busy("item-7"), "10.0.0.2": None, "10.0.0.3": idle()}, protocol="HTTP"
    )
    agents.answers.clear()  # any /status would fail the restore with a KeyError
    runtime.kube.leases = [bound_lease("chat", "pod-10.0.0.3")]
    await restore_held_agents(runtime, handle)
    assert await free_agents(handle.broker) == {"pod-10.0.0.1", "pod-10.0.0.2"}
    assert ("ns", "chat") in runtime.leases.restored
    assert agents.unbinds == []
    assert not runtime.restorers
