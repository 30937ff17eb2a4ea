"""The agent protocol's route table: which method and path each handler of an agent answers.

Both servers of the protocol build their application here: the SDK's
(:class:`agentpool.agent.server.AgentServer`) and the local kubelet's simulated agent
(:mod:`agentpool.local.kubelet.simulator`), so a path added to the protocol reaches both, by the
same name, and neither can answer a method the other does not.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

from aiohttp import web

from agentpool.agent import answers
from agentpool.wire import protocol

#: Bodies larger than aiohttp's 1 MiB default are accepted: items may be documents.
MAX_BODY_BYTES: Final = 64 * 1024 * 1024

#: (method, path, the name of the server's handler for it), for every path of the protocol.
ROUTES: Final = (
    ("GET", protocol.HEALTHZ_PATH, "_healthz"),
    ("POST", protocol.INVOKE_PATH, "_invoke"),
    ("GET", protocol.STATUS_PATH, "_status"),
    ("POST", protocol.RESET_PATH, "_reset"),
    ("POST", protocol.BIND_PATH, "_bind"),
    ("POST", protocol.UNBIND_PATH, "_unbind"),
)


@web.middleware
async def in_protocol(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Every refusal in the protocol's own shape, aiohttp's too (an unknown path or method, a
    body over the limit): an agent of the SDK never answers a page the operator would take for
    a server that speaks something else."""
    try:
        return await handler(request)
    except web.HTTPException as refusal:
        if refusal.status < 400:
            raise
        return answers.error(refusal.status, protocol.BAD_REQUEST, refusal.text or refusal.reason)


def application(server: object) -> web.Application:
    """An aiohttp application answering every route with ``server``'s handler of that name."""
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[in_protocol])
    for method, path, handler in ROUTES:
        app.router.add_route(method, path, getattr(server, handler))
    return app
