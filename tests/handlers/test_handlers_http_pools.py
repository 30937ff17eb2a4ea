"""An HTTP pool's agents are taken as they are: the operator gives an agent back, ends a cast's
wait and binds and unbinds a lease without asking it anything (no /reset, /status, /bind or
/unbind), and none of its answers counts as outside the protocol. The agent client here fails
any request, so a test passes only if none is made."""

from __future__ import annotations

import asyncio
from typing import Any, NoReturn, cast

import pytest

from agentpool.api import AgentPoolSpec
from agentpool.broker import Broker, Checkout
from agentpool.handlers.binds import LeaseBinding, close_binding, renew_binding
from agentpool.handlers.checkins import note_answer, return_agent, return_when_idle
from agentpool.handlers.runtime import PoolHandle, Runtime
from agentpool.io.agents import AgentClient
from agentpool.io.kube import Kube
from agentpool.pool import ObservedAgent, PoolPolicy
from agentpool.pool.binding import Term
from agentpool.pool.checkin import CheckinOutcome
from agentpool.settings import PoolSettings
from agentpool.wire import protocol


class Silent:
    """An agent client that must not be used: every request to an HTTP pool's agent fails."""

    def __getattr__(self, name: str) -> Any:
        async def refuse(*args: object, **kwargs: object) -> NoReturn:
            raise AssertionError(f"the operator sent an HTTP pool's agent {name}")

        return refuse


def http_pool(**spec: Any) -> tuple[Runtime, PoolHandle]:
    broker = Broker("p", PoolPolicy(min_size=1, max_size=1), clock=lambda: 100.0)
    broker.update_agents(
        [ObservedAgent(name="a", created_at=0.0, ready=True, ready_at=1.0, ip="127.0.0.1")]
    )
    runtime = Runtime(kube=cast(Kube, None), agents=cast(AgentClient, Silent()))
    handle = PoolHandle(
        namespace="ns",
        name="p",
        broker=broker,
        port=8080,
        wake=asyncio.Event(),
        token="t",
        spec=AgentPoolSpec.model_validate({"protocol": "HTTP", **spec}),
    )
    runtime.pools.serve(handle)
    return runtime, handle


async def held(handle: PoolHandle) -> Checkout:
    return await handle.broker.checkout(timeout=0, holder="h")


@pytest.mark.parametrize("outcome", [CheckinOutcome.SUCCESS, CheckinOutcome.FAILURE])
async def test_an_http_pools_agent_goes_back_without_a_reset(outcome: CheckinOutcome) -> None:
    """No POST /reset, even were resetBetweenItems set behind the spec's back."""
    runtime, handle = http_pool()
    handle.reset_between_items = True
    await return_agent(runtime, handle, await held(handle), outcome)
    assert (await held(handle)).agent == "a"


async def test_a_cast_on_an_http_pool_goes_back_without_asking_status() -> None:
    """An HTTP pool's agent cannot say when an item is done: it goes back at once."""
    runtime, handle = http_pool()
    await return_when_idle(runtime, handle, await held(handle), item="i", call_timeout=5)
    assert (await held(handle)).agent == "a"


async def test_a_lease_of_an_http_pool_is_neither_bound_nor_unbound() -> None:
    """A renewal posts no /bind and the lease's end no /unbind: the agent goes back as it is."""
    runtime, handle = http_pool()
    checkout = await held(handle)
    binding = LeaseBinding(
        key=("ns", "chat"),
        pool="p",
        checkout=checkout,
        token="lease-token",
        context=None,
        term=Term(bound=100.0, ttl_seconds=60.0),
        expire_time="2026-01-01T00:00:00Z",
    )
    lease = {"metadata": {"name": "chat", "namespace": "ns", "uid": "l-1"}}
    assert await renew_binding(runtime, handle, lease, binding, "2026-01-01T00:01:00Z") is None
    outcome = await close_binding(runtime, ("ns", "chat"), "p", checkout, delete_secret=False)
    assert outcome is CheckinOutcome.SUCCESS


async def test_no_answer_of_an_http_pools_agent_is_outside_the_protocol() -> None:
    """A 404 page is an answer of the app's own, however many come: the pool never turns
    Degraded OutsideProtocol, and its loop is not woken for it."""
    _, handle = http_pool()
    for _ in range(PoolSettings().outside_protocol_answers + 2):
        note_answer(handle, "a", reason=protocol.BAD_RESPONSE, message="HTTP 404")
    assert (handle.health.outside_protocol, handle.health.last_outside) == (0, None)
    assert not handle.wake.is_set()
