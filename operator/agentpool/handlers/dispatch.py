"""The PoolRun engine's dispatcher, backed by the operator's brokers and agent client.

The engine (``agentpool.runs``) knows only protocols; this adapter gives it checkouts from the
pool's broker, calls through :mod:`agentpool.io.agents` with the pool's token (or, to an HTTP
pool's agents, the item as a request of its own, its answer read by
:func:`agentpool.runs.requests.read_answer`), and returns agents with the outcome the broker
needs. A checkout of a pool that serves another protocol than the run speaks is refused
(:class:`~agentpool.runs.contracts.ProtocolMismatch`). A call races the broker's word that its
agent died, so a crashed agent fails its item at once rather than after the call timeout.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from typing import Any

from opentelemetry import trace

from agentpool import metrics, tracing
from agentpool.api import POOL_DEFAULTS
from agentpool.api.reasons import Reason
from agentpool.broker import Checkout
from agentpool.handlers import serving
from agentpool.handlers.checkins import call_held, return_agent, return_later, send_held
from agentpool.handlers.runtime import PoolHandle, Runtime
from agentpool.io.agents import HttpAnswer, InvokeResult
from agentpool.pool.checkin import CheckinOutcome, CheckoutTimedOut, PoolClosed, pool_not_found
from agentpool.runs import requests
from agentpool.runs.contracts import (
    AttemptResult,
    CheckoutTerms,
    HeldAgent,
    ItemRequest,
    ProtocolMismatch,
    Waiting,
)
from agentpool.wire.envelopes import EnvelopeBody


@dataclass
class AgentCheckout:
    """An agent held for one item: the broker's handle and the pool it came from."""

    handle: PoolHandle
    inner: Checkout
    run: str = ""
    item: str = ""
    """The key of the item the agent was handed, as its envelope's id."""
    cast: bool = False
    abandoned: bool = False
    call_timeout: float = POOL_DEFAULTS.call_timeout_seconds

    @property
    def agent(self) -> str:
        return self.inner.agent


class _Moved(Exception):
    """A checkout's pool closed as it went to another replica: the handle that closed."""

    def __init__(self, handle: PoolHandle, error: PoolClosed) -> None:
        super().__init__(str(error))
        self.handle = handle
        self.error = error


class BrokerDispatcher:
    """Checkouts, calls and checkins for the runs of one namespace.

    The first ``backdated`` checkouts wait as from ``arrived`` (the broker's clock), when the
    run arrived: its first items are in line from then, not from when it got through starting.
    """

    def __init__(
        self,
        runtime: Runtime,
        namespace: str,
        *,
        arrived: float | None = None,
        backdated: int = 0,
    ) -> None:
        self._runtime = runtime
        self._namespace = namespace
        self._arrived = arrived
        self._backdated = backdated
        # The run's metric series, looked up once rather than on every item. The dispatcher
        # lives as long as its run, and a run's series are dropped only once it is gone.
        self._series: dict[tuple[str, ...], Any] = {}

    async def checkout(
        self, terms: CheckoutTerms, *, waiting: Waiting | None = None
    ) -> AgentCheckout:
        """An agent of the pool, waiting for the pool too. A pool handed to another replica
        meanwhile (replicas that share the pools) is waited for as one not served yet: the run
        follows it there and stops here, or it comes back."""
        deadline = time.monotonic() + terms.timeout
        while True:
            try:
                return await self._checkout(terms, waiting)
            except _Moved as moved:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise moved.error from None
                await self._runtime.pools.dropped(moved.handle, remaining)
                terms = replace(terms, timeout=remaining)

    async def _checkout(self, terms: CheckoutTerms, waiting: Waiting | None) -> AgentCheckout:
        pool, timeout = terms.pool, terms.timeout
        # The item's span (the engine's) learns the namespace, which only the dispatcher knows.
        trace.get_current_span().set_attribute(tracing.NAMESPACE, self._namespace)
        key = (self._namespace, pool)
        handle = self._runtime.pools.get(key)
        if handle is None:
            # A pool applied together with its run may be created a moment after it, and a
            # restarted operator serves its pools a moment after its runs: wait the checkout
            # timeout for the pool before calling it missing, and say at once that it is.
            subject = f"pool/{pool}"
            if waiting is not None and not await self._pool_exists(pool):
                waiting.begin(
                    subject,
                    Reason.POOL_NOT_FOUND,
                    f"{pool_not_found(self._namespace, pool)}: its items wait up to "
                    f"{timeout:g}s for it to be created",
                )
            handle = await self._runtime.pools.wait(key, timeout)
            if handle is not None and waiting is not None:
                waiting.end(subject)
        if handle is None:
            if not await self._pool_exists(pool):
                raise pool_not_found(self._namespace, pool, waited=timeout)
            raise CheckoutTimedOut(f'AgentPool "{pool}" is not served yet after {timeout:g}s')
        refusal = requests.mismatch(pool, handle.spec.protocol, speaks=terms.speaks)
        if refusal is not None:
            raise ProtocolMismatch(refusal)
        since = None
        if self._backdated > 0:
            self._backdated -= 1
            since = self._arrived
        try:
            inner = await self._take(handle, terms, since)
        except PoolClosed as error:
            if error.reason == PoolClosed.DELETED:
                raise
            raise _Moved(handle, error) from None
        return AgentCheckout(handle=handle, inner=inner, run=terms.holder)

    async def _take(
        self, handle: PoolHandle, terms: CheckoutTerms, since: float | None
    ) -> Checkout:
        """The broker's checkout, timed in the metrics and on the item's span."""
        pool = terms.pool
        started = time.monotonic()
        try:
            inner = await handle.broker.checkout(
                timeout=terms.timeout, priority=terms.priority, holder=terms.holder, since=since
            )
        except CheckoutTimedOut:
            metrics.CHECKOUT_TIMEOUTS.labels(self._namespace, pool).inc()
            tracing.note_checkout(time.monotonic() - started, failed=Reason.CHECKOUT_TIMEOUT)
            raise
        elapsed = time.monotonic() - started
        kind = "scaleup" if inner.waited else "warm"
        metrics.CHECKOUT_SECONDS.labels(self._namespace, pool, kind).observe(elapsed)
        tracing.note_checkout(elapsed, kind=kind, agent=inner.agent)
        return inner

    async def _pool_exists(self, pool: str) -> bool:
        return await serving.find_pool(self._runtime, self._namespace, pool) is not None

    async def invoke(
        self, checkout: HeldAgent, envelope: EnvelopeBody, *, timeout: float, cast: bool
    ) -> InvokeResult:
        assert isinstance(checkout, AgentCheckout)
        inner = checkout.inner
        if inner.is_lost:
            return _lost(inner)
        checkout.call_timeout = timeout
        checkout.item = str(envelope.get("id", ""))
        started = time.monotonic()
        try:
            result = await call_held(
                self._runtime, checkout.handle, inner, envelope, timeout=timeout, cast=cast
            )
        except asyncio.CancelledError:
            # The run stops (suspended, deleted, the operator exiting): the agent carries on
            # with the item, so it goes back once it reports idle rather than being retired.
            checkout.abandoned = True
            raise
        self._count(checkout.run, started, int(envelope.get("attempt", 1)), result)
        if result is None:
            return _lost(inner)
        checkout.cast = cast and result.ok
        return result

    async def send(
        self, checkout: HeldAgent, request: ItemRequest, *, timeout: float, attempt: int
    ) -> AttemptResult:
        assert isinstance(checkout, AgentCheckout)
        inner = checkout.inner
        if inner.is_lost:
            return _lost(inner)
        started = time.monotonic()
        # A run stopped mid-request leaves the agent lost (its state unknown): an HTTP pool's
        # agent cannot be asked when it is done, as an agent of the protocol is.
        answer = await send_held(
            self._runtime,
            checkout.handle,
            inner,
            request,
            timeout=timeout,
            limit=requests.ANSWER_MAX,
        )
        result: AttemptResult
        if answer is None:
            result = _lost(inner)
        elif isinstance(answer, HttpAnswer):
            result = requests.read_answer(
                request, answer.status, answer.content_type, answer.body, whole=answer.whole
            )
        else:
            result = answer
        self._count(checkout.run, started, attempt, result)
        return result

    def _count(self, run: str, started: float, attempt: int, result: AttemptResult | None) -> None:
        """An item's attempt in the run's metric series."""
        self._run_series("seconds", run).observe(time.monotonic() - started)
        if attempt > 1:
            self._run_series("retries", run).inc()
        ok = result is not None and result.ok
        self._run_series("succeeded" if ok else "failed", run).inc()

    def _run_series(self, name: str, run: str) -> Any:
        series = self._series.get((name, run))
        if series is None:
            namespace = self._namespace
            if name == "seconds":
                series = metrics.ITEM_SECONDS.labels(namespace, run)
            elif name == "retries":
                series = metrics.RETRIES.labels(namespace, run)
            else:
                series = metrics.ITEMS.labels(namespace, run, name)
            self._series[(name, run)] = series
        return series

    async def checkin(self, checkout: HeldAgent, outcome: CheckinOutcome) -> None:
        assert isinstance(checkout, AgentCheckout)
        handle, inner = checkout.handle, checkout.inner
        outcome = CheckinOutcome(outcome)
        if (checkout.cast and outcome in (CheckinOutcome.SUCCESS, CheckinOutcome.FAILURE)) or (
            checkout.abandoned and outcome is CheckinOutcome.LOST and not inner.is_lost
        ):
            # A cast item, or one whose run stopped mid-call, is still running on the agent: its
            # slot goes back once the agent reports that item done.
            return_later(
                self._runtime,
                handle,
                inner,
                item=checkout.item,
                call_timeout=checkout.call_timeout,
            )
            return
        await return_agent(self._runtime, handle, inner, outcome)


def _lost(inner: Checkout) -> InvokeResult:
    """The answer for a call whose agent was lost before or while it ran."""
    return InvokeResult(
        ok=False, reason=Reason.AGENT_LOST, message=inner.lost_reason or "agent lost", lost=True
    )
