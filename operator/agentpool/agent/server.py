"""The agent side of the protocol: an aiohttp server that runs one ``Agent`` item after item.

``agentpool.agent.running`` runs it as a process; tests and embedders may drive an ``AgentServer``
themselves (``serve_until``). The server listens first and runs the start-up after, so
``/healthz`` answers 503 until the agent is warm and the readiness probe admits it only then. It
serves as many items at once as it has slots (``agentpool.agent.slots``: async handlers side by
side on the loop, sync ones on a thread each); SIGTERM drains: no new work, the current items
finish, then the process exits 0. A handler that is an async generator function answers a caller
that asks for it part by part, as server-sent events (``agentpool.agent.streams``), and anyone
else with the list of its parts.

Tokens are compared in constant time and never logged; ``/healthz`` is the one path that needs
no token, because a kubelet's readiness probe cannot carry a secret without writing it into the
pod spec, and all it learns is whether the agent is warm. The pool's token opens every path. While
the agent is bound to a lease (``/bind``, ``/unbind``: ``agentpool.agent.binding``), the lease's
own token opens ``/invoke`` and ``/status`` too, until the lease's expiry by the agent's clock.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from aiohttp import web

from agentpool.agent import answers, binding, routes, streams, traces
from agentpool.agent.context import Context
from agentpool.agent.settings import Settings
from agentpool.agent.slots import Slots
from agentpool.agent.worker import Worker, is_async, is_async_generator
from agentpool.wire import events, protocol, tokens
from agentpool.wire.envelopes import Envelope, parse_envelope

log = logging.getLogger("agentpool.agent")

_JSON = answers.JSON_TYPE


class Served(Protocol):
    """What the server needs of an agent: an :class:`agentpool.agent.Agent` is one."""

    @property
    def name(self) -> str: ...
    @property
    def logger(self) -> logging.Logger: ...
    @property
    def handler(self) -> Callable[[Any, Any, Context], Any]: ...
    @property
    def startup(self) -> Callable[[], Any] | None: ...
    @property
    def reset(self) -> Callable[[Any], Any] | None: ...
    @property
    def bind(self) -> Callable[[Any, binding.Binding], Any] | None: ...
    @property
    def unbind(self) -> Callable[[Any, binding.Binding], Any] | None: ...


class AgentServer:
    """Serves one agent: readiness, an item per slot at a time, status, reset, leases and a
    graceful drain. ``clock`` (UTC now) is the agent's own, against which a lease's expiry is
    read."""

    def __init__(
        self, agent: Served, settings: Settings, *, clock: Callable[[], datetime] | None = None
    ) -> None:
        self.agent = agent
        self.settings = settings
        self.ready = False
        self.draining = False
        self.slots = Slots(settings.slots)
        self.uses = 0
        self.port: int | None = None
        self._state: Any = None
        self._token = settings.token.encode()
        self._clock = clock or _utc_now
        self._binder = binding.Binder()
        # One bind or unbind at a time: a second waits, then finds the first one's outcome.
        self._binding_one = asyncio.Lock()
        self._items: set[asyncio.Task[tuple[int, bytes]]] = set()
        self._handler_is_async = is_async(agent.handler)
        self._handler_streams = is_async_generator(agent.handler)
        self._worker: Worker | None = None

    @property
    def busy(self) -> bool:
        """At least one slot is busy."""
        return self.slots.busy

    @property
    def current(self) -> Any:
        """The id of the oldest item served now, or None."""
        return self.slots.current

    def application(self) -> web.Application:
        """The aiohttp application serving the protocol's paths."""
        return routes.application(self)

    async def serve_until(self, stop: asyncio.Event) -> int:
        """Listen, start up, serve until ``stop`` is set, drain; the exit status
        (``agentpool.agent.running`` sets ``stop`` on SIGTERM; an embedder sets it itself)."""
        self._worker = Worker(f"agent-{self.agent.name}", threads=self.settings.slots)
        runner = web.AppRunner(
            self.application(), access_log=None, handle_signals=False, shutdown_timeout=5.0
        )
        await runner.setup()
        try:
            try:
                await web.TCPSite(runner, self.settings.host, self.settings.port).start()
            except OSError as exc:
                log.error("cannot listen on %s:%d: %s", self.settings.host, self.settings.port, exc)
                return 1
            self.port = int(runner.addresses[0][1])
            log.info(
                "agent %s listening on http://%s:%d, starting up",
                self.agent.name,
                self.settings.host,
                self.port,
            )
            return await self._serve(stop)
        finally:
            await runner.cleanup()

    async def _serve(self, stop: asyncio.Event) -> int:
        starting = asyncio.create_task(self._start_up())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if starting.done() and starting.exception() is not None:
            stopping.cancel()
            error = starting.exception()
            log.error("start-up failed: %s", answers.describe(error), exc_info=error)
            return 1
        await stopping
        self.draining = True
        if not starting.done():
            starting.cancel()
            log.info("stopped during start-up")
            return 0
        if self.busy:
            items = json.dumps(self.slots.items, default=str)
            log.info("draining: finishing items %s", items)
            try:
                await asyncio.wait_for(self.slots.wait_idle(), self.settings.drain_seconds)
            except TimeoutError:
                items = json.dumps(self.slots.items, default=str)
                log.error(
                    "items %s did not finish within %.1fs of SIGTERM",
                    items,
                    self.settings.drain_seconds,
                )
                return 1
        log.info("drained after %d items, exiting", self.uses)
        return 0

    async def _start_up(self) -> None:
        started = time.perf_counter()
        if self.agent.startup is not None:
            self._state = await self._call(self.agent.startup)
        self.ready = True
        log.info("ready after %.3fs", time.perf_counter() - started)

    async def _call(self, fn: Any, *args: Any) -> Any:
        """Call one of the author's functions: awaited if async, in the worker thread if not."""
        if is_async(fn):
            return await fn(*args)
        assert self._worker is not None, "the worker starts with the server"
        result = await self._worker.call(fn, *args)
        if inspect.isawaitable(result):
            result = await result
        return result

    def _authorized(self, request: web.Request, *, lease: bool = False) -> bool:
        """Whether the request carries the pool's token or, where ``lease`` allows it, the token
        of the lease the agent is bound to, before that lease's expiry."""
        given = tokens.bearer_token(request.headers.get("Authorization", ""))
        if given is None:
            return False
        if tokens.same_token(given, self._token):
            return True
        return lease and self._binder.accepts(given, self._clock())

    def _refusal(self, request: web.Request, *, lease: bool = False) -> web.Response | None:
        """The answer to a request that may not touch the agent now, or None if it may."""
        if not self._authorized(request, lease=lease):
            return answers.error(
                401,
                protocol.UNAUTHORIZED,
                "a valid 'Authorization: Bearer <token>' header is required",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if self.draining:
            return answers.error(
                503, protocol.DRAINING, "the agent is shutting down and takes no work"
            )
        if not self.ready:
            return answers.error(503, protocol.NOT_READY, "the agent's start-up has not finished")
        return None

    async def _healthz(self, request: web.Request) -> web.Response:
        if self.ready and not self.draining:
            return web.Response(body=b'{"ready":true}', content_type=_JSON)
        return web.Response(status=503, body=b'{"ready":false}', content_type=_JSON)

    async def _invoke(self, request: web.Request) -> web.StreamResponse:
        refusal = self._refusal(request, lease=True)
        if refusal is not None:
            return refusal
        prefer = request.headers.get(protocol.PREFER_HEADER, "")
        parsed = parse_envelope(await request.read(), prefer=prefer)
        if isinstance(parsed, str):
            return answers.error(400, protocol.BAD_REQUEST, parsed)
        if self.draining:
            return answers.error(
                503, protocol.DRAINING, "the agent is shutting down and takes no work"
            )
        if self.slots.full:
            return self._busy_answer()
        # No await between the check above and this claim, so two calls cannot both claim it.
        ticket = self.slots.take(parsed.id)
        self.uses += 1
        carrier = traces.trace_headers(request.headers)
        stream = None
        accept = request.headers.get(protocol.ACCEPT_HEADER, "")
        # A plain handler's output is whole before any of it could be sent: it is answered as
        # JSON, as an agent that cannot stream answers, whatever the caller asked.
        if self._handler_streams and not parsed.cast and events.wants_stream(accept):
            stream = streams.Stream()
        item = asyncio.create_task(self._run_item(parsed, self.uses, ticket, carrier, stream))
        self._items.add(item)
        item.add_done_callback(self._items.discard)
        if parsed.cast:
            return web.Response(status=202, body=b'{"accepted":true}', content_type=_JSON)
        if stream is not None:
            # Not shielded: the parts of a caller that went away have nowhere to go, so the
            # stream's end ends the item.
            keep_alive = self.settings.keep_alive_seconds
            return await stream.write(request, item, keep_alive=keep_alive)
        # Shielded: a caller that goes away must not end the item while the agent looks idle.
        status, body = await asyncio.shield(item)
        return web.Response(status=status, body=body, content_type=_JSON)

    def _busy_answer(self) -> web.Response:
        if self.slots.count == 1 and self.slots.current is not None:
            current = json.dumps(self.slots.current, default=str)
            return answers.error(409, protocol.BUSY, f"the agent is busy with item {current}")
        items = json.dumps(self.slots.items, default=str)
        message = f"all {self.slots.count} slots of the agent are busy (items {items})"
        if not self.slots.items:
            message = "the agent is busy with a reset or a lease's hooks"
        return answers.error(409, protocol.BUSY, message)

    async def _run_item(
        self,
        envelope: Envelope,
        uses: int,
        ticket: int,
        carrier: dict[str, str],
        stream: streams.Stream | None,
    ) -> tuple[int, bytes]:
        """Run one item in its span, which continues the caller's trace (``carrier``); a
        streamed one hands its events to ``stream``, and its status and body are unused."""
        with traces.item_span(
            carrier,
            agent=self.agent.name,
            item=envelope.id,
            attempt=envelope.attempt,
            run=envelope.run,
        ) as span:
            return await self._run_traced(envelope, uses, ticket, span, stream)

    async def _run_traced(
        self,
        envelope: Envelope,
        uses: int,
        ticket: int,
        span: Any,
        stream: streams.Stream | None,
    ) -> tuple[int, bytes]:
        started = time.perf_counter()
        context = Context(
            id=envelope.id,
            attempt=envelope.attempt,
            run=envelope.run,
            uses=uses,
            state=self._state,
            logger=self.agent.logger,
            binding=self._binder.binding,
        )
        message = ""
        try:
            arguments = (envelope.item, envelope.input, context)
            if self._handler_streams:
                # Calling an async generator function runs none of it: its parts are read on.
                parts = self.agent.handler(*arguments)
                output: Any = await streams.read_parts(parts, stream)
            else:
                output = await self._call(self.agent.handler, *arguments)
            if stream is not None:
                status, body = 200, b""
                await stream.end(events.done({"id": envelope.id}))
            else:
                try:
                    status, body = 200, answers.dumps({"output": output})
                except (TypeError, ValueError) as exc:
                    raise ValueError(f"the handler's output is not JSON: {exc}") from exc
        except asyncio.CancelledError:
            if stream is not None:  # only a streamed item's caller going away cancels it
                log.warning(
                    "item %s attempt %d stopped: its caller went away mid-stream",
                    json.dumps(envelope.id, default=str),
                    envelope.attempt,
                )
            raise
        except BaseException as exc:  # the author's failure is this item's, never the agent's
            message = answers.describe(exc)
            status = 500
            traces.note_failure(span, exc, message)
            body = answers.dumps({"error": {"reason": protocol.HANDLER_ERROR, "message": message}})
            # The item's failure names the exception; its traceback is for the author, in the
            # agent's own log.
            log.error(
                "item %s attempt %d failed",
                json.dumps(envelope.id, default=str),
                envelope.attempt,
                exc_info=exc,
            )
            if stream is not None:  # the parts sent before it are no output
                await stream.end(events.error(protocol.HANDLER_ERROR, message))
        finally:
            self.slots.give_back(ticket)
        log.info(
            "item id=%s attempt=%d run=%s outcome=%s duration_ms=%.1f%s",
            json.dumps(envelope.id, default=str),
            envelope.attempt,
            json.dumps(envelope.run),
            "Succeeded" if status == 200 else protocol.HANDLER_ERROR,
            (time.perf_counter() - started) * 1000.0,
            f" message={json.dumps(message)}" if message else "",
        )
        return status, body

    async def _status(self, request: web.Request) -> web.Response:
        if not self._authorized(request, lease=True):
            return answers.error(401, protocol.UNAUTHORIZED, "a valid bearer token is required")
        held = self._binder.binding
        body = {
            "busy": self.busy,
            "current": self.current,
            "slots": self.slots.count,
            "busySlots": self.slots.busy_slots,
            "items": self.slots.items,
            "uses": self.uses,
            "ready": self.ready,
            "draining": self.draining,
            "lease": held.lease if held is not None else None,
        }
        return answers.answer(body)

    async def _reset(self, request: web.Request) -> web.Response:
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        if self.agent.reset is None:
            return answers.error(
                501, protocol.RESET_UNSUPPORTED, "this agent has no reset function"
            )
        if self.busy:
            return self._busy_answer()
        failure = await self._run_claimed((self.agent.reset, (self._state,)))
        if failure is not None:  # a failed reset is reported; the pool retires the agent
            log.warning("reset failed: %s", answers.describe(failure), exc_info=failure)
            return answers.error(500, protocol.RESET_FAILED, answers.describe(failure))
        log.info("reset")
        return web.Response(body=b'{"reset":true}', content_type=_JSON)

    async def _bind(self, request: web.Request) -> web.Response:
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        parsed = binding.parse_bind(await request.read())
        if isinstance(parsed, str):
            return answers.error(400, protocol.BAD_REQUEST, parsed)
        held, lease = parsed.binding, json.dumps(parsed.binding.lease)
        async with self._binding_one:
            bound = self._binder.binding
            if bound is not None and bound.lease != held.lease:
                message = f"the agent is bound to lease {json.dumps(bound.lease)}"
                return answers.error(409, protocol.ALREADY_BOUND, message)
            if bound is not None:  # a renewal: only the expiry moves; the hook ran at the bind
                held = self._binder.renew(parsed)
            else:
                failure = await self._run_claimed((self.agent.bind, (self._state, held)))
                if failure is not None:  # the lease fails and the agent stays unbound
                    why = answers.describe(failure)
                    log.warning("bind to lease %s failed: %s", lease, why, exc_info=failure)
                    return answers.error(500, protocol.BIND_FAILED, why)
                self._binder.bind(parsed)
        done = "renewed" if bound is not None else "bound"
        log.info("lease %s %s until %s", lease, done, held.expire_time)
        return answers.answer({"lease": held.lease, "expireTime": held.expire_time})

    async def _unbind(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return answers.error(401, protocol.UNAUTHORIZED, "the pool's bearer token is required")
        parsed = binding.parse_unbind(await request.read())
        if isinstance(parsed, str):
            return answers.error(400, protocol.BAD_REQUEST, parsed)
        async with self._binding_one:
            if not self._binder.holds(parsed.lease):
                return answers.answer({})  # not this lease's agent, or unbound already
            # The token and context go first, so no call with them starts while the hooks run.
            taken = self._binder.unbind()
            failure = await self._run_claimed(
                (self.agent.unbind, (self._state, taken)), (self.agent.reset, (self._state,))
            )
        lease = json.dumps(parsed.lease)
        if failure is not None:  # the operator retires an agent it cannot take back clean
            why = answers.describe(failure)
            log.warning("unbind from lease %s failed: %s", lease, why, exc_info=failure)
            return answers.error(500, protocol.UNBIND_FAILED, why)
        log.info("unbound from lease %s", lease)
        return answers.answer({})

    async def _run_claimed(
        self, *calls: tuple[Callable[..., Any] | None, tuple[Any, ...]]
    ) -> BaseException | None:
        """Run the author's functions given (skipping the absent) in order with every slot
        claimed, so no item runs beside them; the exception that stopped them, if any. Items
        already running (ones a lease's holder started, say) are let finish first."""
        async with self.slots.exclusive():
            try:
                for fn, args in calls:
                    if fn is not None:
                        await self._call(fn, *args)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # the author's failure, handed to the caller to report
                return exc
        return None


def _utc_now() -> datetime:
    return datetime.now(UTC)
