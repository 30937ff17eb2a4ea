"""The handlers are bound to kopf as before: the same ids, and each gets the operator's Runtime
even though kopf passes a ``runtime`` keyword (how long the handler has run) of its own."""

from __future__ import annotations

import asyncio
import datetime
import functools
import inspect
from typing import Any

import kopf
from kopf._core.actions import invocation

from agentpool.broker import Broker
from agentpool.handlers import operator
from agentpool.handlers.runtime import PoolHandle, Runtime
from agentpool.io.connection import Connection
from agentpool.pool import PoolPolicy

IDS = {
    "build_registry.<locals>.login",  # an activity: kopf keeps no progress for it
    "build_registry.<locals>.stop_serving",  # an activity too, as the operator stops
    "pools",
    "pod_event",
    "pool_event",
    "pool_loop",
    "pool_drain",
    "run_event",
    "run_loop",
    # Leases are driven from their events alone: no daemon, no deletion handler, no finalizer.
    "lease_event",
}


def _handlers(registry: kopf.OperatorRegistry) -> list[Any]:
    found = []
    for part in vars(registry).values():
        if hasattr(part, "get_all_handlers"):
            found += part.get_all_handlers()
    return found


def _registry() -> kopf.OperatorRegistry:
    runtime = Runtime(kube=None, agents=None)  # type: ignore[arg-type]
    return operator.build_registry(runtime, Connection())


def test_every_handler_keeps_its_id() -> None:
    """kopf keeps progress under a handler's id: none may change, none may be added (one may
    go, with the state kopf kept for it)."""
    assert {str(handler.id) for handler in _handlers(_registry())} == IDS


def test_bound_handlers_take_the_runtime_positionally() -> None:
    """kopf's own ``runtime`` keyword must land in ``**kwargs``, not on the Runtime."""
    for handler in _handlers(_registry()):
        if isinstance(handler.fn, functools.partial):
            first = next(iter(inspect.signature(handler.fn.func).parameters.values()))
            assert first.kind is inspect.Parameter.POSITIONAL_ONLY, handler.id


def test_a_handler_called_as_kopf_calls_it_reaches_the_pool() -> None:
    """A pool event, invoked with kopf's keywords, wakes the pool's loop."""

    async def scenario() -> bool:
        runtime = Runtime(kube=None, agents=None)  # type: ignore[arg-type]
        registry = operator.build_registry(runtime, Connection())
        wake = asyncio.Event()
        runtime.pools[("ns", "p")] = PoolHandle(
            namespace="ns", name="p", broker=Broker("p", PoolPolicy()), port=8080, wake=wake
        )
        [handler] = [h for h in _handlers(registry) if str(h.id) == "pool_event"]
        kwargs = {"namespace": "ns", "name": "p", "runtime": datetime.timedelta(0)}
        await invocation.invoke(handler.fn, kwargs=kwargs)
        return wake.is_set()

    assert asyncio.run(scenario())
