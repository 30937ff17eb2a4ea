"""Loopback servers for tests: an aiohttp application on a free port for the length of a test,
and the request reading of the tests' raw HTTP/1.1 agents."""

from __future__ import annotations

import asyncio
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


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """Read one HTTP/1.1 request with a Content-Length body from ``reader``; its head."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    await reader.readexactly(length)
    return head
