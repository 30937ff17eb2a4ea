"""The simulated kubelet's one in-process agent: the agent protocol on every simulated pod.

In simulated mode (``Kubelet(simulated_delay=...)``, a switch for the benchmarks) no pod runs a
process. A :class:`Simulator` listens on each simulated pod's own address and port, and one aiohttp
application answers on all of them, telling the pods apart by the address a connection came in
on, so the operator reaches each agent at ``http://podIP:port`` as it would a real one.

Each pod gets a listening socket of its own: one socket on ``0.0.0.0`` would take the port on
every address of the machine, clashing with the agents of any other local cluster on it and
answering on outside interfaces too, and one address with a port per pod cannot be, since a
pool's port is the same for all its agents. A listening socket costs about 1 KiB of the
process's memory and 4 KiB of the kernel's, so 10,000 simulated pods cost some 50 MiB and
10,000 file descriptors.

The agent echoes each item after the simulator's delay, or after ``input.delaySeconds`` when the
run gives one (so a benchmark can hold agents busy), and keeps what ``GET /status`` reports
(``busy``, ``current``, ``uses``). It takes the pool's token from the pod's ``AGENTPOOL_TOKEN``
and a bound lease's token as the SDK does (:mod:`agentpool.agent.binding`); ``/reset``,
``/bind`` and ``/unbind`` do nothing beyond the protocol's bookkeeping. Used by
:mod:`agentpool.local.kubelet.simulatedpods`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from aiohttp import web

from agentpool.agent import answers, binding, routes
from agentpool.wire import protocol, tokens
from agentpool.wire.envelopes import Envelope, parse_envelope

DELAY_INPUT = "delaySeconds"
_BACKLOG = 64

Parsed = TypeVar("Parsed")


@dataclass(eq=False)
class SimulatedAgent:
    """One simulated pod's agent: its token, what it is doing, and where it listens."""

    address: tuple[str, int]
    token: bytes
    busy: bool = False
    current: Any = None
    uses: int = 0
    binder: binding.Binder = field(default_factory=binding.Binder)
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    listener: asyncio.Server | None = None

    def __post_init__(self) -> None:
        self.idle.set()

    def authorized(self, request: web.Request, *, lease: bool = False) -> bool:
        given = tokens.bearer_token(request.headers.get("Authorization", ""))
        if given is None:
            return False
        if tokens.same_token(given, self.token):
            return True
        return lease and self.binder.accepts(given, datetime.now(UTC))


def _local(transport: asyncio.BaseTransport) -> tuple[str, int] | None:
    """The address and port a connection came in on: which simulated pod it is for."""
    sockname = transport.get_extra_info("sockname")
    return (str(sockname[0]), int(sockname[1])) if sockname else None


def _unauthorized() -> web.Response:
    return answers.error(
        401,
        protocol.UNAUTHORIZED,
        "a valid 'Authorization: Bearer <token>' header is required",
        headers={"WWW-Authenticate": "Bearer"},
    )


def _busy(agent: SimulatedAgent) -> web.Response:
    return answers.error(409, protocol.BUSY, f"the agent is busy with item {agent.current!r}")


class Simulator:
    """Serves the agent protocol for every simulated pod, in the kubelet's own event loop."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.agents: dict[tuple[str, int], SimulatedAgent] = {}
        self._runner: web.AppRunner | None = None
        self._items: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        app = routes.application(self)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()

    async def stop(self) -> None:
        for agent in list(self.agents.values()):
            self._close(agent)
        for item in list(self._items):
            item.cancel()
        await asyncio.gather(*self._items, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def serve(self, ip: str, port: int, token: str) -> SimulatedAgent:
        """Listen on ip:port as an agent with ``token``; OSError when the address is taken."""
        assert self._runner is not None, "the simulator is not started"
        assert self._runner.server is not None, "the simulator is not started"
        agent = SimulatedAgent((ip, port), token.encode())
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((ip, port))
            sock.listen(_BACKLOG)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise

        loop = asyncio.get_running_loop()
        agent.listener = await loop.create_server(self._runner.server, sock=sock)
        self.agents[agent.address] = agent
        return agent

    async def remove(self, agent: SimulatedAgent, grace: float) -> None:
        """Stop listening, let the item in hand finish within ``grace``, and drop every
        connection, as a process that ends would."""
        if agent.listener is not None:
            agent.listener.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(agent.idle.wait(), grace)
        self._close(agent)

    def _close(self, agent: SimulatedAgent) -> None:
        if agent.listener is not None:
            agent.listener.close()
            agent.listener = None
        server = self._runner.server if self._runner is not None else None
        for handler in server.connections if server is not None else []:
            transport = handler.transport
            if transport is not None and _local(transport) == agent.address:
                transport.abort()
        if self.agents.get(agent.address) is agent:
            del self.agents[agent.address]

    def _agent(self, request: web.Request) -> SimulatedAgent:
        transport = request.transport
        address = _local(transport) if transport is not None else None
        agent = self.agents.get(address) if address is not None else None
        if agent is None:
            # The pod is gone: its connections end as a dead process's would.
            if transport is not None:
                transport.abort()
            raise web.HTTPServiceUnavailable()
        return agent

    async def _healthz(self, request: web.Request) -> web.Response:
        self._agent(request)
        return answers.answer({"ready": True})

    async def _invoke(self, request: web.Request) -> web.Response:
        agent = self._agent(request)
        if not agent.authorized(request, lease=True):
            return _unauthorized()
        prefer = request.headers.get(protocol.PREFER_HEADER, "")
        parsed = parse_envelope(await request.read(), prefer=prefer)
        if isinstance(parsed, str):
            return answers.error(400, protocol.BAD_REQUEST, parsed)
        if agent.busy:
            return _busy(agent)
        agent.busy, agent.current = True, parsed.id
        agent.uses += 1
        agent.idle.clear()
        item = asyncio.create_task(self._run_item(agent, parsed))
        self._items.add(item)
        item.add_done_callback(self._items.discard)
        if parsed.cast:
            return web.Response(
                status=202, body=b'{"accepted":true}', content_type=answers.JSON_TYPE
            )
        return answers.answer({"output": await asyncio.shield(item)})

    async def _run_item(self, agent: SimulatedAgent, envelope: Envelope) -> Any:
        try:
            await asyncio.sleep(self._delay_of(envelope))
            return envelope.item
        finally:
            agent.busy, agent.current = False, None
            agent.idle.set()

    def _delay_of(self, envelope: Envelope) -> float:
        given = envelope.input.get(DELAY_INPUT) if isinstance(envelope.input, dict) else None
        if isinstance(given, int | float) and not isinstance(given, bool) and given >= 0:
            return float(given)
        return self.delay

    async def _status(self, request: web.Request) -> web.Response:
        agent = self._agent(request)
        if not agent.authorized(request, lease=True):
            return _unauthorized()
        held = agent.binder.binding
        return answers.answer(
            {
                "busy": agent.busy,
                "current": agent.current,
                "slots": 1,
                "busySlots": int(agent.busy),
                "items": [agent.current] if agent.busy else [],
                "uses": agent.uses,
                "ready": True,
                "draining": False,
                "lease": held.lease if held is not None else None,
            }
        )

    async def _reset(self, request: web.Request) -> web.Response:
        agent = self._agent(request)
        if not agent.authorized(request):
            return _unauthorized()
        if agent.busy:
            return _busy(agent)
        return answers.answer({"reset": True})

    async def _bind(self, request: web.Request) -> web.Response:
        return await self._operator_request(request, binding.parse_bind, _bound)

    async def _unbind(self, request: web.Request) -> web.Response:
        return await self._operator_request(request, binding.parse_unbind, _unbound)

    async def _operator_request(
        self,
        request: web.Request,
        parse: Callable[[bytes], Parsed | str],
        answer: Callable[[SimulatedAgent, Parsed], web.Response],
    ) -> web.Response:
        """A request only the pool's token may make: refused without it (401) or with a body
        ``parse`` rejects (400), else ``answer``ed for the pod it came to."""
        agent = self._agent(request)
        if not agent.authorized(request):
            return _unauthorized()
        parsed = parse(await request.read())
        if isinstance(parsed, str):
            return answers.error(400, protocol.BAD_REQUEST, parsed)
        return answer(agent, parsed)


def _bound(agent: SimulatedAgent, parsed: binding.BindRequest) -> web.Response:
    """Bind the agent to the lease, or renew the lease it is bound to; 409 for another one."""
    bound = agent.binder.binding
    if bound is not None and bound.lease != parsed.binding.lease:
        message = f"the agent is bound to lease {bound.lease!r}"
        return answers.error(409, protocol.ALREADY_BOUND, message)
    held = agent.binder.renew(parsed) if bound is not None else parsed.binding
    if bound is None:
        agent.binder.bind(parsed)
    return answers.answer({"lease": held.lease, "expireTime": held.expire_time})


def _unbound(agent: SimulatedAgent, parsed: binding.UnbindRequest) -> web.Response:
    """Let the lease go if the agent is bound to it; nothing to do otherwise."""
    if agent.binder.holds(parsed.lease):
        agent.binder.unbind()
    return answers.answer({})
