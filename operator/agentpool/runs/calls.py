"""One attempt at one item: check out an agent, hand it the item's envelope, check it back in.

The engine's lanes make every attempt through the run's :class:`AgentCalls`. A retry goes to
another agent than the one that failed it when one is free at once. The agent gets the envelope
of the agent protocol (:func:`agentpool.wire.envelopes.envelope_body`), or, for a run with
``spec.request`` (on HTTP pools), the item as a request of its own
(:func:`agentpool.runs.requests.build_request`): the one way an attempt differs, chosen once per
run, the pool's protocol held to it at checkout. What it answers becomes
a :class:`Verdict` (:func:`judge`, pure): an output (encoded once, for the size cap, the result
ConfigMap and the journal alike), a failure with its reason, or a refusal of the operator's own
token, which is for the operator to mend and costs the item no attempt. The agent goes back
``lost`` when its state is unknown, and the engine records the verdict. Which attempt an item is
on, and how many retries a run made, is :mod:`agentpool.runs.attempts`.
"""

from __future__ import annotations

import asyncio
import contextlib
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace

from agentpool import tracing
from agentpool.api.reasons import Reason
from agentpool.pool.checkin import CheckinOutcome, CheckoutFailed
from agentpool.runs.backlog import Work
from agentpool.runs.config import RunConfig
from agentpool.runs.contracts import (
    AttemptResult,
    CheckoutTerms,
    Dispatcher,
    HeldAgent,
    Waiting,
)
from agentpool.runs.requests import AnswerResult, build_request, speaks
from agentpool.runs.results import CHUNK_BYTES, encode
from agentpool.wire.envelopes import envelope_body

OUTPUT_MAX = CHUNK_BYTES - 1024
"""The largest output an item may have, in bytes of JSON: it must fit one result ConfigMap."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one attempt came to, and how its agent goes back."""

    checkin: CheckinOutcome
    ok: bool = False
    output: Any = None
    encoded: str = ""
    """``output`` in :func:`~agentpool.runs.results.encode`'s JSON, when ``ok``."""
    reason: str = ""
    message: str = ""
    refused: bool = False
    """The agent refused the operator's token: the item waits for another, attempt unchanged."""


def judge(result: AttemptResult) -> Verdict:
    """The verdict on an agent's answer."""
    if isinstance(result, AnswerResult):
        return _judge_answer(result)
    if not result.ok and result.reason == Reason.UNAUTHORIZED:
        return Verdict(checkin=CheckinOutcome.LOST, refused=True)
    checkin = (
        CheckinOutcome.LOST
        if result.lost
        else (CheckinOutcome.SUCCESS if result.ok else CheckinOutcome.FAILURE)
    )
    return _verdict(result, checkin)


def _judge_answer(result: AnswerResult) -> Verdict:
    """The verdict on an HTTP pool's answer: a failure is the agent's only on a 5xx; the token
    refusal of the agent protocol does not arise, as no token is sent."""
    if result.lost:
        checkin = CheckinOutcome.LOST
    elif result.ok or not result.agent_failed:
        checkin = CheckinOutcome.SUCCESS
    else:
        checkin = CheckinOutcome.FAILURE
    return _verdict(result, checkin)


def _verdict(result: AttemptResult, checkin: CheckinOutcome) -> Verdict:
    if not result.ok:
        return Verdict(
            checkin=checkin, reason=result.reason or Reason.CALL_FAILED, message=result.message
        )
    encoded = encode(result.output)
    size = len(encoded.encode())
    if size > OUTPUT_MAX:
        message = f"output of {size} bytes exceeds {OUTPUT_MAX}"
        return Verdict(checkin=checkin, reason=Reason.OUTPUT_TOO_LARGE, message=message)
    return Verdict(checkin=checkin, ok=True, output=result.output, encoded=encoded)


def note_verdict(span: trace.Span, verdict: Verdict) -> None:
    """Mark an attempt's span with its verdict: ``Succeeded`` or the failure's reason."""
    if verdict.ok:
        span.set_attribute(tracing.OUTCOME, tracing.SUCCEEDED)
        return
    reason = Reason.UNAUTHORIZED if verdict.refused else verdict.reason
    note_failure(span, reason, verdict.message or reason)


def note_failure(span: trace.Span, reason: str, message: str) -> None:
    """Mark an attempt's span failed for ``reason``."""
    span.set_attribute(tracing.OUTCOME, reason)
    span.set_status(trace.StatusCode.ERROR, message)


class AgentCalls:
    """The run's side of its agents: checkouts from the broker and calls through the client."""

    def __init__(
        self,
        config: RunConfig,
        *,
        dispatcher: Dispatcher,
        waiting: Waiting | None = None,
    ) -> None:
        self._config = config
        self._dispatcher = dispatcher
        self._waiting = waiting
        self._terms: dict[str, CheckoutTerms] = {}
        self._speaks = speaks(config.spec)
        request = config.spec.request
        # Chosen once: the run speaks one way to all its pools, and a pool that serves the other
        # is refused at checkout.
        self._attempt = self._invoke if request is None else self._send

    def _new_terms(self, pool: str) -> CheckoutTerms:
        """The terms of every checkout from ``pool``, made for its first item."""
        config = self._config
        terms = self._terms[pool] = CheckoutTerms(
            pool,
            timeout=config.checkout_timeout(pool),
            priority=config.spec.priority,
            holder=config.name,
            speaks=self._speaks,
        )
        return terms

    def traced(self, work: Work) -> AbstractContextManager[trace.Span]:
        """The span of one attempt at ``work``, current while it lasts: the checkout's and the
        agent call's spans are its children."""
        return tracing.span(
            tracing.RUN_ITEM_SPAN,
            attributes={
                tracing.RUN: self._config.name,
                tracing.POOL: work.pool,
                tracing.ITEM_ID: work.key,
                tracing.ITEM_INDEX: work.index,
                tracing.ATTEMPT: work.attempt,
            },
        )

    async def checkout(self, work: Work) -> HeldAgent:
        """An agent for ``work``: another than the last one to fail it, when one is free at
        once. Raises the dispatcher's :class:`CheckoutFailed` (or ``PoolNotFound``)."""
        terms = self._terms.get(work.pool) or self._new_terms(work.pool)
        checkout = await self._dispatcher.checkout(terms, waiting=self._waiting)
        if work.last_agent is None or checkout.agent != work.last_agent:
            return checkout
        # A retry goes to another agent when one is free at once; else to the same one. With
        # several slots the strategy may hand out the same agent again for its free slots, so
        # those are held until another agent comes or none is free: the count of slots bounds it.
        same: list[HeldAgent] = []
        try:
            other = await self._dispatcher.checkout(terms.at_once())
            while other.agent == work.last_agent:
                same.append(other)
                other = await self._dispatcher.checkout(terms.at_once())
        except CheckoutFailed:
            await self._give_back(same)
            return checkout
        except BaseException:
            await self._give_back([checkout, *same])
            raise
        # The first agent goes back untouched: its failure streak must survive the swap, or a
        # broken agent would never be quarantined.
        await self._give_back([checkout, *same])
        return other

    async def _give_back(self, checkouts: list[HeldAgent]) -> None:
        for held in checkouts:
            await self._dispatcher.checkin(held, CheckinOutcome.UNUSED)

    async def call(self, work: Work, checkout: HeldAgent) -> Verdict:
        """Hand ``work`` to the agent checked out for it, and give the agent back."""
        try:
            verdict = await self._attempt(work, checkout)
            await self._dispatcher.checkin(checkout, verdict.checkin)
        except asyncio.CancelledError:
            # Stopped mid-call: the agent's state is unknown, and it must not stay checked out.
            with contextlib.suppress(Exception):
                await self._dispatcher.checkin(checkout, CheckinOutcome.LOST)
            raise
        return verdict

    async def _invoke(self, work: Work, checkout: HeldAgent) -> Verdict:
        config = self._config
        spec = config.spec
        body = envelope_body(
            id=work.key, item=work.value, input=spec.input, attempt=work.attempt, run=config.name
        )
        try:
            result = await self._dispatcher.invoke(
                checkout, body, timeout=config.call_timeout(work.pool), cast=spec.mode == "Cast"
            )
        except Exception as error:  # the agent client's own bug must cost one attempt, not the run
            return Verdict(
                checkin=CheckinOutcome.LOST, reason=Reason.CALL_FAILED, message=repr(error)
            )
        return judge(result)

    async def _send(self, work: Work, checkout: HeldAgent) -> Verdict:
        config = self._config
        assert config.spec.request is not None
        try:
            request = build_request(config.spec.request, work.value)
            result = await self._dispatcher.send(
                checkout, request, timeout=config.call_timeout(work.pool), attempt=work.attempt
            )
        except Exception as error:  # the agent client's own bug must cost one attempt, not the run
            return Verdict(
                checkin=CheckinOutcome.LOST, reason=Reason.CALL_FAILED, message=repr(error)
            )
        return judge(result)
