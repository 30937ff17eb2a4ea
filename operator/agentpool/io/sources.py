"""The HTTP source's client: the module that talks to a PoolRun's source service.

``POST {url}`` with ``{"active": [ids]}`` answers ``{"item": ...}``, ``{"item": null}`` for
"nothing ready yet" or ``{"done": true}``; :func:`agentpool.runs.sources.read_answer` reads the
answer, this module only carries it.
"""

from __future__ import annotations

from collections.abc import Sequence

import aiohttp

from agentpool.runs.contracts import Clock, SystemClock
from agentpool.runs.sources import Pulled, Signal, SourceError, read_answer


class HttpSource:
    """A source service: ``POST {url}`` with ``{"active": [ids]}``.

    It answers ``{"item": ...}``, ``{"item": null}`` (nothing ready yet) or ``{"done": true}``.
    Connection failures and 5xx answers are retried with back-off; after ``attempts`` the source
    fails with a message naming the URL and the last error.
    """

    replayable = False
    total = None

    def __init__(
        self,
        url: str,
        *,
        attempts: int = 5,
        retry_delay: float = 0.2,
        request_timeout: float = 30.0,
        clock: Clock | None = None,
    ) -> None:
        self.url = url
        self._attempts = attempts
        self._retry_delay = retry_delay
        self._timeout = aiohttp.ClientTimeout(total=request_timeout)
        self._clock = clock or SystemClock()
        self._session: aiohttp.ClientSession | None = None

    async def next(self, active: Sequence[str]) -> Pulled | Signal:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        last = ""
        delay = self._retry_delay
        for attempt in range(1, self._attempts + 1):
            try:
                async with self._session.post(self.url, json={"active": list(active)}) as reply:
                    if reply.status >= 500:
                        last = f"HTTP {reply.status}"
                    elif reply.status >= 400:
                        raise SourceError(
                            f"http source {self.url} refused the request: HTTP {reply.status}: "
                            f"{(await reply.text())[:200]}"
                        )
                    else:
                        return read_answer(self.url, await reply.text())
            except (aiohttp.ClientError, TimeoutError) as error:
                last = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
            if attempt < self._attempts:
                await self._clock.sleep(delay)
                delay *= 2
        raise SourceError(
            f"http source {self.url} unreachable after {self._attempts} attempts: {last}"
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
