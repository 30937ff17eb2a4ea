"""A plain HTTP server for the forwarding scenario: it knows nothing of agentpool.

An aiohttp web application, as many agents built as web services are, listening on
``AGENT_HOST``:``AGENT_PORT`` (the pod's address and the pool's port, which any pod is given).
``POST /echo`` answers a small JSON body with the length of what it got; ``GET /stream`` answers
server-sent events: the first at once, then one every :data:`EVERY` seconds until
:data:`EVENTS` are sent (about 1.2 s in all), then ends. ``GET /health`` is its readiness probe.
Run as ``python bench/http_agent.py``.
"""

from __future__ import annotations

import asyncio
import json
import os

from aiohttp import web

#: Events of one streamed answer, and the wait between two: the last comes EVERY x (EVENTS - 1) s
#: after the first.
EVENTS, EVERY = 7, 0.2


async def health(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def echo(request: web.Request) -> web.Response:
    body = await request.read()
    return web.json_response({"echoed": len(body)})


async def stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for n in range(EVENTS):
        if n:
            await asyncio.sleep(EVERY)
        await response.write(b"data: " + json.dumps({"n": n}).encode() + b"\n\n")
    await response.write_eof()
    return response


def main() -> None:
    app = web.Application()
    app.add_routes(
        [web.get("/health", health), web.post("/echo", echo), web.get("/stream", stream)]
    )
    host, port = os.environ.get("AGENT_HOST", "127.0.0.1"), int(os.environ["AGENT_PORT"])
    web.run_app(app, host=host, port=port, print=None, access_log=None)


if __name__ == "__main__":
    main()
