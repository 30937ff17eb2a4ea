"""Calling a checked-out agent and giving it back: the ways a run's item, a lease and a gateway
call return their agent.

:mod:`agentpool.handlers.dispatch` and :mod:`agentpool.handlers.gateway` call the agent with
:func:`call_held`, which the broker's word that the agent died cuts short, and give it back with
:func:`return_agent` when the item is done, or with :func:`return_later` when the item still
runs on the agent (a cast, or a call whose holder went away mid-call);
:mod:`agentpool.handlers.leases` calls :func:`return_agent` when a lease ends. When the pool asks
for a reset between items, the agent is reset first, over :mod:`agentpool.io.agents`, and one
whose reset fails is retired. Every answer an agent gives :func:`call_held` (and a lease's
``POST /bind``, through :func:`note_answer`) is counted in the pool's health, so agents that
answer outside the protocol make the pool Degraded. An HTTP pool's agents serve no protocol to
answer outside of, nor ``/reset`` or ``/status``: their answers are not counted, and they go
back as they are.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Coroutine
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from opentelemetry import trace

from agentpool import tracing
from agentpool.api.reasons import Reason
from agentpool.broker import Checkout
from agentpool.handlers.idling import wait_until_idle
from agentpool.handlers.runtime import PoolHandle, Runtime
from agentpool.io.agents import HttpAnswer, InvokeResult
from agentpool.pool import health
from agentpool.pool.checkin import CheckinOutcome
from agentpool.pool.restoring import IdleWatch
from agentpool.runs.contracts import ItemRequest
from agentpool.wire import protocol
from agentpool.wire.envelopes import EnvelopeBody

T = TypeVar("T")


async def _unless_lost(checkout: Checkout, call: Awaitable[T]) -> T | None:
    """Await ``call``, or None when the broker says the agent died meanwhile. The broker's word
    ends the call at once, not at its timeout: it cancels the calling task itself (a task of its
    own per call would cost every item). A cancellation from anywhere else goes on to the
    caller, who decides what becomes of the agent."""
    task = asyncio.current_task()
    assert task is not None
    cut = False

    def cut_short() -> None:
        nonlocal cut
        cut = True
        task.cancel()

    forget = checkout.on_lost(cut_short)
    try:
        return await call
    except asyncio.CancelledError:
        if not cut or task.uncancel() > 0:
            raise
        return None
    finally:
        forget()


def _call_span(handle: PoolHandle, checkout: Checkout) -> AbstractContextManager[trace.Span]:
    """The span of one call to the agent ``checkout`` holds."""
    return tracing.span(
        tracing.AGENT_CALL_SPAN,
        kind=trace.SpanKind.CLIENT,
        attributes={
            tracing.NAMESPACE: handle.namespace,
            tracing.POOL: handle.name,
            tracing.AGENT: checkout.agent,
        },
    )


async def call_held(
    runtime: Runtime,
    handle: PoolHandle,
    checkout: Checkout,
    envelope: EnvelopeBody | bytes,
    *,
    timeout: float,
    cast: bool,
) -> InvokeResult | None:
    """``POST /invoke`` to the agent ``checkout`` holds, with the pool's token; None when the
    agent's pod died meanwhile (:func:`_unless_lost`)."""
    with _call_span(handle, checkout) as span:
        result = await _unless_lost(
            checkout,
            runtime.agents.invoke(
                checkout.endpoint, handle.token, envelope, timeout=timeout, cast=cast
            ),
        )
        if result is not None and not result.lost:
            note_answer(handle, checkout.agent, reason=result.reason, message=result.message)
        if span.is_recording():
            note_outcome(span, result)
        return result


async def send_held(
    runtime: Runtime,
    handle: PoolHandle,
    checkout: Checkout,
    request: ItemRequest,
    *,
    timeout: float,
    limit: int,
) -> HttpAnswer | InvokeResult | None:
    """Send ``request`` to the HTTP pool's agent ``checkout`` holds; None when the agent's pod
    died meanwhile (:func:`_unless_lost`). The answer is not counted in the pool's health: an
    HTTP pool's agents are not held to the agent protocol."""
    with _call_span(handle, checkout) as span:
        answer = await _unless_lost(
            checkout,
            runtime.agents.send(
                checkout.endpoint,
                request.method,
                request.path,
                request.headers,
                request.body,
                timeout=timeout,
                limit=limit,
            ),
        )
        if span.is_recording():
            if not isinstance(answer, HttpAnswer):
                note_outcome(span, answer)
            elif 200 <= answer.status < 300:
                span.set_attribute(tracing.OUTCOME, tracing.SUCCEEDED)
            else:
                span.set_attribute(tracing.OUTCOME, Reason.HTTP_STATUS)
                span.set_status(trace.StatusCode.ERROR, f"HTTP {answer.status}")
        return answer


def note_answer(handle: PoolHandle, agent: str, *, reason: str, message: str) -> None:
    """Count ``agent``'s answer to a request of the protocol in the pool's health (``reason``
    ``BadResponse``: outside the protocol; any other, or none for success: in it), and wake the
    pool's loop when that turns its Degraded condition, so the status says so at once. An HTTP
    pool's agents are taken as they are: no answer of theirs is outside a protocol."""
    if not handle.spec.speaks_protocol:
        return
    outside = reason == protocol.BAD_RESPONSE
    if not outside and handle.health.last_outside is None:
        # The hot path: an answer in the protocol to a pool that has no run of strays to end.
        return
    settings = handle.settings
    now = time.time()
    before = health.speaks_outside(
        handle.health,
        now,
        threshold=settings.outside_protocol_answers,
        memory_seconds=settings.outside_protocol_memory_seconds,
    )
    handle.health = health.note_answer(
        handle.health, agent, outside=outside, message=message, now=now
    )
    after = health.speaks_outside(
        handle.health,
        now,
        threshold=settings.outside_protocol_answers,
        memory_seconds=settings.outside_protocol_memory_seconds,
    )
    if before != after:
        handle.poke()


def note_outcome(span: trace.Span, result: InvokeResult | None) -> None:
    """Mark ``span`` with what the agent's call came to: a lost agent when ``result`` is None."""
    if result is not None and result.ok:
        span.set_attribute(tracing.OUTCOME, tracing.SUCCEEDED)
        return
    reason = result.reason if result is not None else protocol.AGENT_LOST
    span.set_attribute(tracing.OUTCOME, reason)
    span.set_status(trace.StatusCode.ERROR, result.message if result is not None else reason)


async def return_agent(
    runtime: Runtime, handle: PoolHandle, checkout: Checkout, outcome: CheckinOutcome
) -> None:
    """Give an agent back to its pool, resetting it first when the pool asks for that; an agent
    whose reset fails is retired. An HTTP pool's agents serve no ``/reset`` (its spec refuses
    resetBetweenItems)."""
    if (
        outcome in (CheckinOutcome.SUCCESS, CheckinOutcome.FAILURE)
        and handle.reset_between_items
        and handle.spec.speaks_protocol
        and not checkout.is_lost
        and not await runtime.agents.reset(checkout.endpoint, handle.token)
    ):
        outcome = CheckinOutcome.RESET_FAILED
    handle.broker.checkin(checkout, outcome)


async def return_when_idle(
    runtime: Runtime, handle: PoolHandle, checkout: Checkout, *, item: str, call_timeout: float
) -> None:
    """Give the agent back once it reports ``item`` done (``GET /status``); one still busy with
    it past ``call_timeout``, or gone, is in an unknown state and retired. An HTTP pool's agent
    cannot be asked: it goes back at once, its request having ended with the connection that
    carried it."""
    if not handle.spec.speaks_protocol:
        await return_agent(runtime, handle, checkout, CheckinOutcome.SUCCESS)
        return
    watch = IdleWatch(deadline=time.monotonic() + call_timeout)
    done = await wait_until_idle(
        runtime.agents,
        checkout,
        handle.token,
        watch=watch,
        poll_seconds=runtime.settings.runs.cast_poll_seconds,
        item=item,
    )
    if done is not None:
        await return_agent(runtime, handle, checkout, CheckinOutcome.SUCCESS)
        return
    handle.broker.checkin(checkout, CheckinOutcome.LOST)


def return_later(
    runtime: Runtime, handle: PoolHandle, checkout: Checkout, *, item: str, call_timeout: float
) -> None:
    """:func:`return_when_idle` in a task of its own, kept by the runtime until it ends."""
    in_background(
        runtime, return_when_idle(runtime, handle, checkout, item=item, call_timeout=call_timeout)
    )


def in_background(runtime: Runtime, returning: Coroutine[Any, Any, None]) -> None:
    """Run a return of an agent in a task the runtime keeps until it ends, so the holder need
    not wait for it."""
    task = asyncio.create_task(returning)
    runtime.returning.add(task)
    task.add_done_callback(runtime.returning.discard)
