"""The agent side of the protocol: an aiohttp server that runs one ``Agent`` item after item.

``Agent.run`` and ``python -m agentpool.agent`` call ``run_agent``; tests and embedders may drive an
``AgentServer`` themselves. The server listens first and runs the start-up after, so ``/healthz``
answers 503 until the agent is warm and the readiness probe admits it only then. One item runs at
a time; SIGTERM drains: no new work, the current item finishes, then the process exits 0.

The token is compared in constant time and never logged; ``/healthz`` is the one path that needs
no token, because a kubelet's readiness probe cannot carry a secret without writing it into the
pod spec, and all it learns is whether the agent is warm.
"""

from __future__ import annotations

import asyncio
import hmac
import inspect
import json
import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from aiohttp import web

from agentpool.agent import protocol
from agentpool.agent.context import Context
from agentpool.agent.envelopes import Envelope, parse_envelope
from agentpool.agent.settings import ConfigError, Settings, configure_logging
from agentpool.agent.worker import Worker, is_async

log = logging.getLogger("agentpool.agent")

#: Error messages are cut to this length: they travel into run status and must stay small.
MAX_MESSAGE_CHARS = 2000
#: Bodies larger than aiohttp's 1 MiB default are accepted: items may be documents.
MAX_BODY_BYTES = 64 * 1024 * 1024
_JSON = "application/json"


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


class AgentServer:
    """Serves one agent: readiness, one item at a time, status, reset and a graceful drain."""

    def __init__(self, agent: Served, settings: Settings) -> None:
        self.agent = agent
        self.settings = settings
        self.ready = False
        self.draining = False
        self.busy = False
        self.current: Any = None
        self.uses = 0
        self.port: int | None = None
        self._state: Any = None
        self._token = settings.token.encode()
        self._idle = asyncio.Event()
        self._idle.set()
        self._items: set[asyncio.Task[tuple[int, bytes]]] = set()
        self._handler_is_async = is_async(agent.handler)
        self._worker: Worker | None = None

    def application(self) -> web.Application:
        """The aiohttp application serving the protocol's four paths."""
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_get(protocol.HEALTHZ_PATH, self._healthz)
        app.router.add_post(protocol.INVOKE_PATH, self._invoke)
        app.router.add_get(protocol.STATUS_PATH, self._status)
        app.router.add_post(protocol.RESET_PATH, self._reset)
        return app

    async def run(self) -> int:
        """Listen, start up, serve until SIGTERM or SIGINT, drain; return the exit status."""
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        signals = (signal.SIGTERM, signal.SIGINT)
        for signum in signals:
            loop.add_signal_handler(signum, stop.set)
        self._worker = Worker(f"agent-{self.agent.name}")
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
            for signum in signals:
                loop.remove_signal_handler(signum)

    async def _serve(self, stop: asyncio.Event) -> int:
        starting = asyncio.create_task(self._start_up())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if starting.done() and starting.exception() is not None:
            stopping.cancel()
            error = starting.exception()
            log.error("start-up failed: %s", _describe(error), exc_info=error)
            return 1
        await stopping
        self.draining = True
        if not starting.done():
            starting.cancel()
            log.info("stopped during start-up")
            return 0
        if self.busy:
            log.info("draining: finishing item %s", json.dumps(self.current, default=str))
            try:
                await asyncio.wait_for(self._idle.wait(), self.settings.drain_seconds)
            except TimeoutError:
                log.error(
                    "item %s did not finish within %.1fs of SIGTERM",
                    json.dumps(self.current, default=str),
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

    def _authorized(self, request: web.Request) -> bool:
        # The scheme is case-insensitive (RFC 9110); the token is compared in constant time.
        scheme, _, token = request.headers.get("Authorization", "").strip().partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(token.strip().encode("utf-8", "surrogateescape"), self._token)

    def _refusal(self, request: web.Request) -> web.Response | None:
        """The answer to a request that may not touch the agent now, or None if it may."""
        if not self._authorized(request):
            return _error(
                401,
                protocol.UNAUTHORIZED,
                "a valid 'Authorization: Bearer <token>' header is required",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if self.draining:
            return _error(503, protocol.DRAINING, "the agent is shutting down and takes no work")
        if not self.ready:
            return _error(503, protocol.NOT_READY, "the agent's start-up has not finished")
        return None

    async def _healthz(self, request: web.Request) -> web.Response:
        if self.ready and not self.draining:
            return web.Response(body=b'{"ready":true}', content_type=_JSON)
        return web.Response(status=503, body=b'{"ready":false}', content_type=_JSON)

    async def _invoke(self, request: web.Request) -> web.Response:
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        prefer = request.headers.get(protocol.PREFER_HEADER, "")
        parsed = parse_envelope(await request.read(), prefer=prefer)
        if isinstance(parsed, str):
            return _error(400, protocol.BAD_REQUEST, parsed)
        if self.draining:
            return _error(503, protocol.DRAINING, "the agent is shutting down and takes no work")
        if self.busy:
            current = json.dumps(self.current, default=str)
            return _error(409, protocol.BUSY, f"the agent is busy with item {current}")
        # No await between the check above and this claim, so two calls cannot both claim it.
        self.busy = True
        self.current = parsed.id
        self.uses += 1
        self._idle.clear()
        item = asyncio.create_task(self._run_item(parsed, self.uses))
        self._items.add(item)
        item.add_done_callback(self._items.discard)
        if parsed.cast:
            return web.Response(status=202, body=b'{"accepted":true}', content_type=_JSON)
        # Shielded: a caller that goes away must not end the item while the agent looks idle.
        status, body = await asyncio.shield(item)
        return web.Response(status=status, body=body, content_type=_JSON)

    async def _run_item(self, envelope: Envelope, uses: int) -> tuple[int, bytes]:
        started = time.perf_counter()
        context = Context(
            id=envelope.id,
            attempt=envelope.attempt,
            run=envelope.run,
            uses=uses,
            state=self._state,
            logger=self.agent.logger,
        )
        message = ""
        try:
            output = await self._call(self.agent.handler, envelope.item, envelope.input, context)
            try:
                status, body = 200, _dumps({"output": output})
            except (TypeError, ValueError) as exc:
                raise ValueError(f"the handler's output is not JSON: {exc}") from exc
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # the author's failure is this item's, never the agent's
            message = _describe(exc)
            status = 500
            body = _dumps({"error": {"reason": protocol.HANDLER_ERROR, "message": message}})
            # The item's failure names the exception; its traceback is for the author, in the
            # agent's own log.
            log.error(
                "item %s attempt %d failed",
                json.dumps(envelope.id, default=str),
                envelope.attempt,
                exc_info=exc,
            )
        finally:
            self.busy = False
            self.current = None
            self._idle.set()
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
        if not self._authorized(request):
            return _error(401, protocol.UNAUTHORIZED, "a valid bearer token is required")
        body = {
            "busy": self.busy,
            "current": self.current,
            "uses": self.uses,
            "ready": self.ready,
            "draining": self.draining,
        }
        return web.Response(body=_dumps(body), content_type=_JSON)

    async def _reset(self, request: web.Request) -> web.Response:
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        if self.agent.reset is None:
            return _error(501, protocol.RESET_UNSUPPORTED, "this agent has no reset function")
        if self.busy:
            current = json.dumps(self.current, default=str)
            return _error(409, protocol.BUSY, f"the agent is busy with item {current}")
        self.busy = True
        self._idle.clear()
        try:
            await self._call(self.agent.reset, self._state)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a failed reset is reported; the pool retires the agent
            log.warning("reset failed: %s", _describe(exc), exc_info=exc)
            return _error(500, protocol.RESET_FAILED, _describe(exc))
        finally:
            self.busy = False
            self._idle.set()
        log.info("reset")
        return web.Response(body=b'{"reset":true}', content_type=_JSON)


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


def _describe(exc: BaseException | None) -> str:
    """The exception as Python's last traceback line names it: ``KeyError: 'n'``, not ``'n'``."""
    if exc is None:
        return "unknown error"
    text = "".join(traceback.format_exception_only(exc)).strip()
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 1] + "…"
    return text


def _error(
    status: int, reason: str, message: str, *, headers: Mapping[str, str] | None = None
) -> web.Response:
    body = _dumps({"error": {"reason": reason, "message": message}})
    return web.Response(status=status, body=body, content_type=_JSON, headers=headers)


async def serve(agent: Served, *, host: str | None = None, port: int | None = None) -> int:
    """Serve ``agent`` in the running loop with settings from the environment; the exit status."""
    return await AgentServer(agent, Settings.from_env(os.environ, host=host, port=port)).run()


def run_agent(agent: Served, *, host: str | None = None, port: int | None = None) -> int:
    """Configure logging and serve ``agent`` until SIGTERM; the process's exit status."""
    configure_logging()
    try:
        settings = Settings.from_env(os.environ, host=host, port=port)
    except ConfigError as exc:
        print(f"agentpool.agent: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(AgentServer(agent, settings).run())
