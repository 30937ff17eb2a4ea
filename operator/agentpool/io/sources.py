"""The HTTP source's client: the module that talks to a PoolRun's source service.

``POST {url}`` with ``{"active": [ids], "max": n}`` answers ``{"item": ...}``, ``{"items": [...]}``
(at most ``n``), ``{"item": null}`` for "nothing ready yet" or ``{"done": true}``. This module
only carries the answer's text, over one session whose connection is kept alive between requests
(a run asks its source again and again), retrying what may pass (a connection failure, a 5xx
answer); :func:`agentpool.runs.sources.read_answer` reads it, and
:class:`agentpool.handlers.sources.HttpItemSource` joins the two for the run engine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import aiohttp


class SourceUnavailable(Exception):
    """The source service refused the request or could not be reached; the message says which
    URL and why."""


class SourceClient:
    """A source service's client: ``POST {url}`` with ``{"active": [ids], "max": n}``, the answer's
    text back. One session (and its kept-alive connection) serves every request until
    :meth:`close`.

    Connection failures and 5xx answers are retried with back-off (``sleep`` waits between
    attempts); after ``attempts`` it raises :class:`SourceUnavailable` naming the URL and the last
    error. A 4xx answer is not retried.
    """

    def __init__(
        self,
        url: str,
        *,
        attempts: int = 5,
        retry_delay: float = 0.2,
        request_timeout: float = 30.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.url = url
        self._attempts = attempts
        self._retry_delay = retry_delay
        self._timeout = aiohttp.ClientTimeout(total=request_timeout)
        self._sleep = sleep
        self._session: aiohttp.ClientSession | None = None

    async def post(self, active: Sequence[str], room: int = 1) -> str:
        """The text of the service's answer to ``{"active": active, "max": room}``."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        body = {"active": list(active), "max": room}
        last = ""
        delay = self._retry_delay
        for attempt in range(1, self._attempts + 1):
            try:
                async with self._session.post(self.url, json=body) as reply:
                    if reply.status >= 500:
                        last = f"HTTP {reply.status}"
                    elif reply.status >= 400:
                        raise SourceUnavailable(
                            f"http source {self.url} refused the request: HTTP {reply.status}: "
                            f"{(await reply.text())[:200]}"
                        )
                    else:
                        return await reply.text()
            except (aiohttp.ClientError, TimeoutError) as error:
                last = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
            if attempt < self._attempts:
                await self._sleep(delay)
                delay *= 2
        raise SourceUnavailable(
            f"http source {self.url} unreachable after {self._attempts} attempts: {last}"
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
