"""A PoolRun's HTTP source as the run engine pulls from it.

The engine does no I/O and the I/O modules know nothing of the engine, so this is where the two
meet, as ``dispatch`` is for the brokers: :class:`HttpItemSource` asks the source service through
:class:`agentpool.io.sources.SourceClient` and reads each answer with
:func:`agentpool.runs.sources.read_answer`. ``runs.open_source`` opens one for a run whose source
is ``http``.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentpool.io.sources import SourceClient, SourceUnavailable
from agentpool.runs.sources import Batch, Signal, SourceError, read_answer


class HttpItemSource:
    """A source service: ``POST {url}`` with ``{"active": [ids], "max": room}``.

    It answers ``{"item": ...}``, ``{"items": [...]}`` (up to ``room`` of them; ``"done": true``
    beside it when they are the last), ``{"item": null}`` or ``{"items": []}`` (nothing ready
    yet), or ``{"done": true}``.
    The client retries connection failures and 5xx answers with back-off; once it gives up the
    source fails with a message naming the URL and the last error.
    """

    replayable = False
    total = None

    def __init__(self, client: SourceClient) -> None:
        self._client = client
        self.url = client.url
        self.name = f"http source {client.url}"

    async def next(self, active: Sequence[str], room: int = 1) -> Batch | Signal:
        try:
            text = await self._client.post(active, room)
        except SourceUnavailable as error:
            raise SourceError(str(error)) from None
        return read_answer(self.url, text)

    async def close(self) -> None:
        await self._client.close()
