"""Agents that the SDK tests run as real processes, each making one behaviour deterministic.

Nothing here waits on the clock to mean something: a start-up or an item that must still be
running while the test looks at the agent waits for a gate file that the test creates when it is
done looking.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from agentpool.agent import Agent, Binding, Context

#: A gate left closed for this long means the test has gone; give up rather than hang the agent.
GATE_TIMEOUT_SECONDS = 120.0


def _wait_for_gate(path: str) -> None:
    deadline = time.monotonic() + GATE_TIMEOUT_SECONDS
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gate {path} never opened")
        time.sleep(0.005)


def _startup() -> dict[str, Any]:
    gate = os.environ.get("STARTUP_GATE")
    if gate:
        _wait_for_gate(gate)
    return {"count": 0, "breakReset": False}


def _handle(item: Any, input: Any, context: Context) -> dict[str, Any]:
    asks = item if isinstance(item, dict) else {}
    if "gate" in asks:
        _wait_for_gate(asks["gate"])
    context.state["count"] += 1
    context.state["breakReset"] = bool(asks.get("breakReset"))
    if asks.get("fail"):
        raise RuntimeError(str(asks["fail"]))
    if "lookup" in asks:
        # A slip an author makes: a key the state does not have raises KeyError(key).
        return {"value": context.state[asks["lookup"]]}
    return {"id": context.id, "count": context.state["count"], "uses": context.uses}


def _reset(state: dict[str, Any]) -> None:
    if state["breakReset"]:
        raise RuntimeError("the reset broke on purpose")
    state["count"] = 0


#: Counts items since its last reset; items may wait on a ``gate`` file, fail, look up a key of
#: the state that may be missing, or break the reset.
gated = Agent(_handle, startup=_startup, reset=_reset, name="gated")


def _broken_startup() -> None:
    raise FileNotFoundError("no model at /models/missing.bin")


#: An agent whose start-up fails, as one whose model is missing would.
broken = Agent(_handle, startup=_broken_startup, name="broken")


async def _async_startup() -> dict[str, int]:
    return {"factor": 3}


async def _async_handle(item: Any, input: Any, context: Context) -> Any:
    if item == "fail":
        raise ValueError("async handlers fail like sync ones")
    return item * context.state["factor"]


#: Every function ``async``: proves coroutines are awaited in the loop rather than threaded.
coroutines = Agent(_async_handle, startup=_async_startup, name="coroutines")

not_an_agent = "a string"


def _leased_startup() -> dict[str, Any]:
    return {"bound": [], "unbound": [], "resets": 0, "breakReset": False}


def _asks(binding: Binding) -> dict[str, Any]:
    return binding.context if isinstance(binding.context, dict) else {}


async def _leased_bind(state: dict[str, Any], binding: Binding) -> None:
    if _asks(binding).get("failBind"):
        raise RuntimeError("the bind broke on purpose")
    state["bound"].append(binding.lease)


def _leased_unbind(state: dict[str, Any], binding: Binding) -> None:
    state["unbound"].append(binding.lease)
    state["breakReset"] = bool(_asks(binding).get("failReset"))
    if _asks(binding).get("failUnbind"):
        raise RuntimeError("the unbind broke on purpose")


def _leased_reset(state: dict[str, Any]) -> None:
    if state["breakReset"]:
        raise RuntimeError("the reset broke on purpose")
    state["resets"] += 1


def _leased_handle(item: Any, input: Any, context: Context) -> dict[str, Any]:
    if isinstance(item, dict) and "gate" in item:
        _wait_for_gate(item["gate"])
    binding = context.binding
    return {
        "lease": binding.lease if binding else None,
        "context": binding.context if binding else None,
        "expireTime": binding.expire_time if binding else None,
        "bound": context.state["bound"],
        "unbound": context.state["unbound"],
        "resets": context.state["resets"],
    }


#: Tells its items which lease it serves and with what context, and records its hooks: an
#: ``async`` bind and a synchronous unbind, which the lease's context can make fail (``failBind``,
#: ``failUnbind``, ``failReset``). An item may wait on a ``gate`` file.
leased = Agent(
    _leased_handle,
    startup=_leased_startup,
    reset=_leased_reset,
    bind=_leased_bind,
    unbind=_leased_unbind,
    name="leased",
)
