"""The gateway's calls, served from the operator's brokers and agent client.

The gateway (:mod:`agentpool.gateway`) knows only protocols; this adapter gives it
:class:`GatewayCalls` (a checkout from the pool's broker, in the one waiting line runs and
leases wait in, a ``POST /invoke`` through :mod:`agentpool.io.agents` with the pool's token, and
the agent given back with the outcome the broker needs) and :class:`KubeReviewer` (TokenReview
and SubjectAccessReview through :mod:`agentpool.io.kube`). No Kubernetes object is written per
call. A caller that goes away while it waits leaves the line (the broker's own cancellation);
one that goes away mid-call leaves the agent with its item, and the agent is taken back once it
reports the item done, so no checkout is ever leaked.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace

from agentpool import GROUP, metrics, tracing
from agentpool.api import POOL_DEFAULTS
from agentpool.api.gateway import PATH_PREFIX, PROXY, GatewayRequest, GatewayVerb
from agentpool.api.raw import RawReviewedUser
from agentpool.api.reasons import GatewayReason
from agentpool.broker import Checkout
from agentpool.gateway import errors
from agentpool.gateway.contracts import Answering, CallAnswer, Caller, ReviewFailed
from agentpool.gateway.forwarding import Forwarded
from agentpool.gateway.requests import EncodedItem
from agentpool.gateway.sessions import SessionKey, SessionTable
from agentpool.handlers import serving
from agentpool.handlers.checkins import call_held, in_background, return_agent, return_later
from agentpool.handlers.runtime import PoolHandle, Runtime
from agentpool.io.agents import ForwardBroken, InvokeResult
from agentpool.pool.checkin import CheckinOutcome, CheckoutFailed, CheckoutTimedOut, PoolNotFound
from agentpool.wire import events, protocol
from agentpool.wire.events import Done, Failed

OK = "OK"
#: The protocol of pools whose agents take any HTTP request, forwarded as it comes.
HTTP = "HTTP"


class KubeReviewer:
    """The cluster's TokenReview and SubjectAccessReview, as the gateway asks them."""

    def __init__(self, runtime: Runtime) -> None:
        self._kube = runtime.kube

    async def authenticate(self, token: str) -> Caller | None:
        try:
            status = await self._kube.review_token(token)
        except Exception as error:  # the cluster did not answer: neither yes nor no
            raise ReviewFailed(_failure("TokenReview", error)) from None
        if not status.get("authenticated"):
            return None
        user = status.get("user") or {}
        extra = user.get("extra") or {}
        return Caller(
            username=str(user.get("username") or ""),
            uid=str(user.get("uid") or ""),
            groups=tuple(str(group) for group in user.get("groups") or ()),
            extra=tuple(sorted((str(k), tuple(map(str, v or ()))) for k, v in extra.items())),
        )

    async def authorize(
        self,
        caller: Caller,
        *,
        verb: str,
        resource: str,
        subresource: str,
        namespace: str,
        pool: str,
    ) -> bool:
        user: RawReviewedUser = {"user": caller.username, "groups": list(caller.groups)}
        if caller.uid:
            user["uid"] = caller.uid
        if caller.extra:
            user["extra"] = {key: list(values) for key, values in caller.extra}
        attributes = {
            "namespace": namespace,
            "verb": verb,
            "group": GROUP,
            "resource": resource,
            "subresource": subresource,
            "name": pool,
        }
        try:
            status = await self._kube.review_access(user, attributes)
        except Exception as error:
            raise ReviewFailed(_failure("SubjectAccessReview", error)) from None
        return bool(status.get("allowed")) and not status.get("denied")


def _failure(review: str, error: Exception) -> str:
    status = getattr(error, "status", None)
    reason = getattr(error, "reason", None)
    if status is not None:
        return f"the {review} was answered {status} {reason or ''}".rstrip()
    return f"the {review} failed: {type(error).__name__}: {error}"


@dataclass
class _Held:
    """What a session holds: its pool's handle and its agent's checkout, and how to stop
    listening for the agent's loss."""

    handle: PoolHandle
    checkout: Checkout
    forget: Callable[[], None] = lambda: None
    #: How its agent goes back when the session ends.
    outcome: CheckinOutcome = CheckinOutcome.SUCCESS


def _refuse_interim(status: int, agent: str) -> None:
    """An agent's 1xx answer (a protocol switch, say) is not forwarded: the gateway passes on
    requests and answers, not connections."""
    if status < 200:
        raise errors.from_agent(
            protocol.BAD_RESPONSE,
            f"agent {agent} answered HTTP {status}: upgrades and other interim answers are not "
            "forwarded",
        )


def _header(headers: Iterable[tuple[str, str]], name: str) -> str | None:
    """The first value of header ``name`` (any case), when it has one."""
    wanted = name.lower()
    return next((value for key, value in headers if key.lower() == wanted and value), None)


def _text(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers]


@dataclass(frozen=True)
class _Series:
    """One pool's and verb's metric series, looked up once rather than on every call."""

    checkout: Any
    seconds: Any
    outcomes: dict[str, Any]

    def outcome(self, namespace: str, pool: str, verb: str, reason: str) -> Any:
        series = self.outcomes.get(reason)
        if series is None:
            series = metrics.GATEWAY_REQUESTS.labels(namespace, pool, verb, reason)
            self.outcomes[reason] = series
        return series


class GatewayCalls:
    """Items of gateway calls and casts handed to the pools' agents."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._settings = runtime.settings.gateway
        self._series: dict[tuple[str, str, str], _Series] = {}
        self._sessions: SessionTable[_Held] = SessionTable(time.monotonic)
        self._sweeping: asyncio.Task[None] | None = None

    async def serve(
        self,
        namespace: str,
        pool: str,
        request: GatewayRequest,
        item: EncodedItem,
        *,
        verb: GatewayVerb,
        answer: Answering | None = None,
    ) -> CallAnswer:
        started = time.monotonic()
        with tracing.span(
            tracing.GATEWAY_CALL_SPAN,
            kind=trace.SpanKind.SERVER,
            attributes={
                tracing.NAMESPACE: namespace,
                tracing.POOL: pool,
                tracing.VERB: verb,
                tracing.ITEM_ID: item.id,
            },
        ) as span:
            try:
                handle = await self._served(
                    namespace,
                    pool,
                    wait=request.wait,
                    checkout_timeout=request.checkout_timeout_seconds,
                )
                if not handle.spec.speaks_protocol:
                    raise errors.invalid(
                        f"pool {namespace}/{pool} is of protocol {HTTP}: its agents take any HTTP "
                        f"request, not items; send them to {PATH_PREFIX}/{namespace}/agentpools/"
                        f"{pool}/proxy/PATH"
                    )
                series = self._series_of(namespace, pool, verb)
                try:
                    called = await self._serve(
                        handle, request, item, cast=verb == "cast", series=series, answer=answer
                    )
                except errors.GatewayError as error:
                    series.outcome(namespace, pool, verb, error.reason).inc()
                    raise
            except errors.GatewayError as error:
                span.set_attribute(tracing.OUTCOME, error.reason)
                span.set_status(trace.StatusCode.ERROR, error.message)
                raise
            span.set_attributes({tracing.OUTCOME: tracing.SUCCEEDED, tracing.AGENT: called.agent})
        series.outcome(namespace, pool, verb, OK).inc()
        series.seconds.observe(time.monotonic() - started)
        return called

    async def forward(
        self, namespace: str, pool: str, request: Forwarded, answer: Answering
    ) -> None:
        started = time.monotonic()
        with tracing.span(
            tracing.GATEWAY_CALL_SPAN,
            kind=trace.SpanKind.SERVER,
            attributes={tracing.NAMESPACE: namespace, tracing.POOL: pool, tracing.VERB: PROXY},
        ) as span:
            try:
                handle = await self._served(
                    namespace,
                    pool,
                    wait=request.wait,
                    checkout_timeout=request.checkout_timeout_seconds,
                )
                if handle.spec.speaks_protocol:
                    raise errors.invalid(
                        f"pool {namespace}/{pool} speaks the agentpool protocol, whose agents take "
                        f"items, not requests: send POST {PATH_PREFIX}/{namespace}/agentpools/"
                        f"{pool}/call, or give the pool spec.protocol: {HTTP}"
                    )
                series = self._series_of(namespace, pool, PROXY)
                try:
                    agent = await self._forward(handle, request, answer, series)
                except errors.GatewayError as error:
                    series.outcome(namespace, pool, PROXY, error.reason).inc()
                    raise
            except errors.GatewayError as error:
                span.set_attribute(tracing.OUTCOME, error.reason)
                span.set_status(trace.StatusCode.ERROR, error.message)
                raise
            span.set_attributes({tracing.OUTCOME: tracing.SUCCEEDED, tracing.AGENT: agent})
        series.outcome(namespace, pool, PROXY, OK).inc()
        series.seconds.observe(time.monotonic() - started)

    async def _forward(
        self, handle: PoolHandle, request: Forwarded, answer: Answering, series: _Series
    ) -> str:
        """One agent holds the request from checkout until its answer has ended or the caller
        has gone, which gives it back at once; an agent that broke off is retired. In a pool
        with sessions, a request that names one goes to its agent, and an answer that names a
        new one keeps its agent for it."""
        spec = handle.spec
        timeout = request.call_timeout_seconds or float(spec.call_timeout_seconds)
        if spec.sessions is not None:
            session = _header(request.headers, spec.sessions.header)
            if session is not None:
                return await self._in_session(handle, request, answer, session, timeout)
        checkout = await self._take(handle, request, series)
        outcome = CheckinOutcome.LOST
        pinned: SessionKey | None = None

        def begin(status: int, headers: Sequence[tuple[bytes, bytes]]) -> None:
            # From the answer's head on: the caller may send the session's next request as soon
            # as it reads the first of the answer, before its end.
            nonlocal pinned
            begun = _header(_text(headers), spec.sessions.header) if spec.sessions else None
            if begun is not None and status < 400 and self._begin(handle, begun, checkout):
                pinned = (handle.namespace, handle.name, begun)
                self._sessions.use(pinned)

        try:
            status, _ = await self._pass_on(checkout, request, answer, timeout, on_head=begin)
            outcome = CheckinOutcome.FAILURE if status >= 500 else CheckinOutcome.SUCCESS
        except errors.AgentKept:
            outcome = CheckinOutcome.FAILURE
            raise
        except (ConnectionError, asyncio.CancelledError):
            outcome = CheckinOutcome.SUCCESS  # the caller went away: the agent is free at once
            raise
        finally:
            if pinned is None:
                handle.broker.checkin(checkout, outcome)
            else:
                self._used(pinned)
                if outcome is CheckinOutcome.LOST:
                    self._end_session(pinned, outcome)  # its agent broke off: so does it
        return checkout.agent

    async def _take(self, handle: PoolHandle, request: Forwarded, series: _Series) -> Checkout:
        """An agent for a forwarded request, through the pool's line as its headers ask."""
        wait = request.checkout_timeout_seconds or float(handle.spec.checkout_timeout_seconds)
        return await self._checkout(
            handle,
            priority=request.priority,
            wait=request.wait,
            holder=f"gateway:{request.method} {request.target}"[:253],
            deadline=time.monotonic() + (wait if request.wait else 0.0),
            series=series,
        )

    async def forward_to_lease(
        self, namespace: str, lease: str, request: Forwarded, answer: Answering
    ) -> None:
        held = self._runtime.leases.held.get((namespace, lease))
        handle = None if held is None else self._runtime.pools.get((namespace, held.pool))
        if held is None or handle is None:
            raise errors.GatewayError(
                404,
                GatewayReason.NOT_FOUND,
                f'AgentLease "{lease}" in namespace "{namespace}" holds no agent here: it is not '
                "Bound (Pending, Expired, Failed or gone), or another replica serves it",
            )
        if handle.spec.speaks_protocol:
            raise errors.invalid(
                f'AgentLease "{lease}" holds an agent of pool {held.pool}, which speaks the '
                "agentpool protocol: call the agent at the lease's status.endpoint with the "
                "lease's own token instead"
            )
        timeout = request.call_timeout_seconds or float(handle.spec.call_timeout_seconds)
        with tracing.span(
            tracing.GATEWAY_CALL_SPAN,
            kind=trace.SpanKind.SERVER,
            attributes={
                tracing.NAMESPACE: namespace,
                tracing.POOL: held.pool,
                tracing.VERB: PROXY,
                tracing.AGENT: held.agent,
            },
        ):
            await self._pass_on(held, request, answer, timeout)

    async def _pass_on(
        self,
        held: Checkout,
        request: Forwarded,
        answer: Answering,
        timeout: float,
        *,
        on_head: Callable[[int, Sequence[tuple[bytes, bytes]]], None] | None = None,
    ) -> tuple[int, Sequence[tuple[bytes, bytes]]]:
        """Send ``request`` to the agent ``held`` names and stream its whole answer back; its
        status and headers. An agent that broke off is a ``GatewayError``; a caller gone (or cut
        for stalling) is a ``ConnectionError``, whatever the agent's side then did."""
        try:
            async with self._runtime.agents.forward(
                held.endpoint,
                request.method,
                request.target,
                request.headers,
                request.body,
                timeout=timeout,
            ) as agent:
                _refuse_interim(agent.status, held.agent)
                if on_head is not None:
                    on_head(agent.status, agent.headers)
                answer.start(agent.status, agent.headers, agent=held.agent)
                async for piece in agent.body:
                    await answer.write(piece)
                answer.end()
                return agent.status, agent.headers
        except ForwardBroken as error:
            if answer.gone:
                raise ConnectionError("the caller went away") from None
            failed = errors.from_agent(error.reason, error.message)
            if not error.lost:
                raise errors.AgentKept(failed.status, failed.reason, failed.message) from None
            raise failed from None

    async def _in_session(
        self,
        handle: PoolHandle,
        request: Forwarded,
        answer: Answering,
        session: str,
        timeout: float,
    ) -> str:
        """A request of an open session, sent to the agent the session holds, past the line; a
        DELETE ends the session once the agent has answered it, and an agent that broke off
        ends it too."""
        key = (handle.namespace, handle.name, session)
        held = self._sessions.use(key)
        if held is None:
            raise errors.session_not_found(handle.namespace, handle.name, session)
        ending: CheckinOutcome | None = None
        try:
            await self._pass_on(held.checkout, request, answer, timeout)
            if request.method == "DELETE":
                ending = CheckinOutcome.SUCCESS
        except errors.GatewayError as error:
            # No whole answer from the session's agent: its state is unknown, so it goes.
            if not isinstance(error, errors.AgentKept):
                ending = CheckinOutcome.LOST
            raise
        finally:
            self._used(key)
            if ending is not None:
                self._end_session(key, ending)
        return held.checkout.agent

    def _begin(self, handle: PoolHandle, session: str, checkout: Checkout) -> bool:
        """Keep ``checkout`` for the session its answer began; False when the id is taken."""
        assert handle.spec.sessions is not None
        key = (handle.namespace, handle.name, session)
        held = _Held(handle, checkout)
        if not self._sessions.begin(
            key, held, idle_timeout=float(handle.spec.sessions.idle_timeout_seconds)
        ):
            return False
        held.forget = checkout.on_lost(lambda: self._end_session(key, CheckinOutcome.LOST))
        if self._sweeping is None:
            self._sweeping = asyncio.create_task(self._sweep_sessions(), name="gateway-sessions")
        return True

    def _end_session(self, key: SessionKey, outcome: CheckinOutcome) -> None:
        """End the session: its agent goes back now, or when its last request in flight is
        over."""
        ended = self._sessions.end(key)
        if ended is None:
            return
        held, free = ended
        held.forget()
        held.outcome = outcome
        if free:
            held.handle.broker.checkin(held.checkout, outcome)

    def _used(self, key: SessionKey) -> None:
        """A request of the session is over; the last of an ended session gives back its
        agent."""
        held = self._sessions.used(key)
        if held is not None:
            held.handle.broker.checkin(held.checkout, held.outcome)

    async def _sweep_sessions(self) -> None:
        """End, about once a second, the sessions idle past their timeout, while any is open."""
        try:
            while len(self._sessions):
                await asyncio.sleep(self._settings.session_sweep_seconds)
                for _key, held in self._sessions.idle():
                    held.forget()
                    held.handle.broker.checkin(held.checkout, CheckinOutcome.SUCCESS)
        finally:
            self._sweeping = None

    def _series_of(self, namespace: str, pool: str, verb: str) -> _Series:
        key = (namespace, pool, verb)
        series = self._series.get(key)
        if series is None:
            series = _Series(
                checkout=metrics.GATEWAY_CHECKOUT_SECONDS.labels(namespace, pool, verb),
                seconds=metrics.GATEWAY_SECONDS.labels(namespace, pool, verb),
                outcomes={},
            )
            self._series[key] = series
        return series

    async def _served(
        self, namespace: str, pool: str, *, wait: bool, checkout_timeout: float | None
    ) -> PoolHandle:
        """The pool's handle (:mod:`agentpool.handlers.serving`); a pool that exists but is not
        served yet (the operator starting) is waited for within the checkout timeout."""
        timeout = checkout_timeout or float(POOL_DEFAULTS.checkout_timeout_seconds)
        try:
            return await serving.served_pool(
                self._runtime,
                namespace,
                pool,
                timeout=lambda _: timeout if wait else 0.0,
                elsewhere_now=True,
            )
        except PoolNotFound as error:
            raise errors.pool_not_found(str(error)) from None
        except serving.NotServed as error:
            raise errors.unavailable(
                str(error), retry_after=self._settings.retry_after_seconds
            ) from None

    async def _serve(
        self,
        handle: PoolHandle,
        request: GatewayRequest,
        item: EncodedItem,
        *,
        cast: bool,
        series: _Series,
        answer: Answering | None = None,
    ) -> CallAnswer:
        spec = handle.spec
        wait = request.checkout_timeout_seconds or float(spec.checkout_timeout_seconds)
        deadline = time.monotonic() + (wait if request.wait else 0.0)
        call_timeout = request.call_timeout_seconds or float(spec.call_timeout_seconds)
        for _ in range(self._settings.refused_tries):
            checkout = await self._checkout(
                handle,
                priority=request.priority,
                wait=request.wait,
                holder=f"gateway:{item.id}",
                deadline=deadline,
                series=series,
            )
            if answer is not None:
                result = await self._stream(handle, checkout, item, call_timeout, answer)
                if answer.started:
                    return self._streamed(handle, checkout, result)
            else:
                result = await self._call(handle, checkout, item, call_timeout, cast=cast)
            if result.ok:
                if cast:
                    return_later(
                        self._runtime, handle, checkout, item=item.id, call_timeout=call_timeout
                    )
                else:
                    self._give_back(handle, checkout, CheckinOutcome.SUCCESS)
                return CallAnswer(agent=checkout.agent, output=result.output)
            if result.reason == protocol.UNAUTHORIZED and result.status_code == 401:
                # The agent holds another pool token (rotated, not yet replaced): it is retired,
                # and the item goes to the next agent, costing the caller nothing.
                handle.broker.checkin(checkout, CheckinOutcome.LOST)
                continue
            outcome = CheckinOutcome.LOST if result.lost else CheckinOutcome.FAILURE
            self._give_back(handle, checkout, outcome)
            raise errors.from_agent(result.reason, result.message)
        raise errors.from_agent(
            protocol.UNAUTHORIZED,
            f"{self._settings.refused_tries} agents of the pool refused its token: the pool is "
            "replacing them; try again shortly",
        )

    async def _checkout(
        self,
        handle: PoolHandle,
        *,
        priority: int,
        wait: bool,
        holder: str,
        deadline: float,
        series: _Series,
    ) -> Checkout:
        started = time.monotonic()
        handle.gateway_waiting += 1
        try:
            checkout = await handle.broker.checkout(
                timeout=max(0.0, deadline - started),
                priority=priority,
                holder=holder,
                max_waiters=handle.spec.max_waiters,
            )
        except CheckoutFailed as error:
            if not wait and isinstance(error, CheckoutTimedOut):
                error = CheckoutTimedOut(f"{error} (the call would not wait)")
            failure = errors.from_checkout(error, retry_after=self._settings.retry_after_seconds)
            tracing.note_checkout(time.monotonic() - started, failed=failure.reason)
            raise failure from None
        finally:
            handle.gateway_waiting -= 1
        elapsed = time.monotonic() - started
        kind = "scaleup" if checkout.waited else "warm"
        tracing.note_checkout(elapsed, kind=kind, agent=checkout.agent)
        series.checkout.observe(elapsed)
        return checkout

    async def _call(
        self,
        handle: PoolHandle,
        checkout: Checkout,
        item: EncodedItem,
        timeout: float,
        *,
        cast: bool,
    ) -> InvokeResult:
        """The agent's answer; a caller gone mid-call leaves the agent with its item, taken
        back once the agent reports it done."""
        try:
            result = await call_held(
                self._runtime, handle, checkout, item.body, timeout=timeout, cast=cast
            )
        except asyncio.CancelledError:
            return_later(self._runtime, handle, checkout, item=item.id, call_timeout=timeout)
            raise
        if result is None:
            reason = checkout.lost_reason or f"agent {checkout.agent} was lost"
            return InvokeResult(ok=False, reason=protocol.AGENT_LOST, message=reason, lost=True)
        return result

    async def _stream(
        self,
        handle: PoolHandle,
        checkout: Checkout,
        item: EncodedItem,
        timeout: float,
        answer: Answering,
    ) -> InvokeResult:
        """The agent's answer asked as events: passed on to the caller as it comes when the agent
        streams, each event read on the way to know how the item ended; a stream that breaks
        off is ended for the caller with an ``error`` event. An agent that answers whole is
        left to the caller's usual answer. A caller gone mid-stream leaves the agent with its
        item, taken back once the agent reports it done, as for a call."""
        relayed = _Relayed()
        try:
            async with self._runtime.agents.invoke_streamed(
                checkout.endpoint, handle.token, item.body, timeout=timeout
            ) as got:
                if isinstance(got, InvokeResult):
                    return got
                answer.start(got.status, _EVENT_STREAM_HEAD, agent=checkout.agent)
                await _relay(got.body, answer, relayed, limit=self._settings.event_limit_bytes)
        except (asyncio.CancelledError, ConnectionError):
            return_later(self._runtime, handle, checkout, item=item.id, call_timeout=timeout)
            raise
        except ForwardBroken as broken:
            relayed.ending = Failed(broken.reason, broken.message)
        except Exception:
            self._give_back(handle, checkout, CheckinOutcome.LOST)
            raise
        ended = relayed.ending
        if isinstance(ended, Done):
            answer.end()
            return InvokeResult(ok=True, status_code=200)
        if ended is None:
            ended = Failed(protocol.AGENT_LOST, f"agent {checkout.agent} ended its stream early")
        lost = ended.reason in (protocol.AGENT_LOST, protocol.CALL_TIMEOUT)
        failed = InvokeResult(ok=False, reason=ended.reason, message=ended.message, lost=lost)
        if relayed.cut:
            return failed  # left unended: the caller's connection is cut, its stream broken
        if not relayed.told:
            try:
                await answer.write(events.error(ended.reason, ended.message))
            except ConnectionError:
                return failed  # the caller went too
        answer.end()
        return failed

    def _streamed(self, handle: PoolHandle, checkout: Checkout, result: InvokeResult) -> CallAnswer:
        """A call answered as events, a failure too: the agent goes back as the answer left it."""
        outcome = CheckinOutcome.SUCCESS if result.ok else CheckinOutcome.FAILURE
        self._give_back(handle, checkout, CheckinOutcome.LOST if result.lost else outcome)
        return CallAnswer(agent=checkout.agent, streamed=True)

    def _give_back(self, handle: PoolHandle, checkout: Checkout, outcome: CheckinOutcome) -> None:
        """Give the agent back now; a reset the pool asks for runs after the caller has its
        answer, the agent held until it is done."""
        if handle.reset_between_items and not checkout.is_lost:
            in_background(self._runtime, return_agent(self._runtime, handle, checkout, outcome))
            return
        handle.broker.checkin(checkout, outcome)


#: The head of a streamed call's answer; the caller takes the agent's events as they come.
_EVENT_STREAM_HEAD = (
    (b"Content-Type", protocol.EVENT_STREAM.encode()),
    (b"Cache-Control", b"no-cache"),
)


@dataclass
class _Relayed:
    """How a streamed answer passed on ended: the event that ended it (None: the stream ended
    without one), whether the caller has that event already (the agent's own ``error``), and
    whether the stream had to be cut (an event past the limit)."""

    ending: Done | Failed | None = None
    told: bool = False
    cut: bool = False


async def _relay(
    pieces: AsyncIterator[bytes], answer: Answering, relayed: _Relayed, *, limit: int
) -> None:
    """Send the agent's events on as they come, reading only the ``done`` and ``error`` ones,
    for the one that ends the answer. A caller gone raises ``ConnectionError``."""
    parser = events.EventParser(limit=limit)
    async for piece in pieces:
        try:
            found = parser.feed(piece)
        except events.EventTooLarge as error:
            relayed.ending, relayed.cut = Failed(protocol.BAD_RESPONSE, str(error)), True
            return
        ending = next(
            (
                said
                for event in found
                if event.type in (events.DONE, events.ERROR)
                and isinstance(said := events.read_event(event), Done | Failed)
            ),
            None,
        )
        await answer.write(piece)
        if ending is not None:
            relayed.ending, relayed.told = ending, isinstance(ending, Failed)
            return
