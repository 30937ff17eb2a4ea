"""How a run asks its source for items: one request at a time, backing off while none is ready.

The engine's slots all take items through one :class:`Intake`: a slot asking while another
request is on its way gets nothing (it does not wait in line), a source that answers "nothing
ready yet" is asked again after a back-off that doubles from ``POLL_FIRST`` to ``POLL_MAX``, and
the back-off starts over when the run's active items change (the source may have something for
it then). The engine names and routes what comes.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentpool.runs.sources import DONE, NOT_READY, ItemSource, Pulled

POLL_FIRST = 0.1
POLL_MAX = 5.0


class Intake:
    """The run's side of its source."""

    def __init__(self, source: ItemSource) -> None:
        self._source = source
        self.done = False
        """The source said it has no more items."""
        self.next_poll = 0.0
        """When the source, having had nothing ready, may be asked again."""
        self._delay = POLL_FIRST
        self._asking = False

    async def take(self, active: Sequence[str], now: float) -> Pulled | None:
        """The source's next item; None when there is none now: the source is done, has
        nothing ready, or another slot is asking it. Raises the source's SourceError."""
        if self.done or self._asking or now < self.next_poll:
            return None
        self._asking = True
        try:
            pulled = await self._source.next(active)
        finally:
            self._asking = False
        if pulled is DONE:
            self.done = True
            return None
        if pulled is NOT_READY:
            self.next_poll = now + self._delay
            self._delay = min(POLL_MAX, self._delay * 2)
            return None
        self._delay = POLL_FIRST
        assert isinstance(pulled, Pulled)
        return pulled

    def poke(self) -> None:
        """The run's active items changed: a source with nothing ready may have something now."""
        self.next_poll = 0.0
        self._delay = POLL_FIRST
