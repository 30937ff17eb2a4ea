"""An aiohttp application served on a free loopback port for the length of a test."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator

from aiohttp import web


@contextlib.asynccontextmanager
async def served(
    app: web.Application, ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[int]:
    """Serve ``app`` on 127.0.0.1 (over TLS with ``ssl_context``) until the block ends; its port."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()
