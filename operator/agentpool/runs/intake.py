"""How a run takes items from its source: one request at a time, backing off while none is ready,
and each item named as it comes.

The engine's lanes all take items through one :class:`Intake`: a lane asking while another request
is on its way gets nothing (it does not wait in line), a source that answers "nothing ready yet" is
asked again after a back-off that doubles between the run settings' source poll times, and the back-
off starts over when the run's active items change (the source may have something for it then). Each
item comes with its index in the source and the key its result is recorded under
(:class:`~agentpool.runs.items.ItemKeys` remembers the ids seen and the keys made up); after an
operator restart a source that does not give its items again goes on from the run's ledger. The
engine routes what comes.

Each request says how many items the source may send (its ``room``: twice ``cap`` less the items
in flight, at least one, at most the settings' batch size), and a source may answer that many in
one batch. The intake names a batch's items as it comes, in order, hands them out one a take, and
asks again only once it has handed out the last: a run holds at most twice ``cap`` items it took
and has not finished, ``cap`` of them in its lanes, so a lane that frees finds its next item
waiting instead of waiting for a request. An item
taken ahead reached no agent; like an item in flight, it lives in the operator's memory only (the
HTTP source is not replayable), so at an operator restart it runs when the source service hands
it out again, and then as its first attempt, which it is. A source that answers more items than
it was asked for loses none: the extra ones are handed out, to lanes as they free, before it is
asked again.

A source that may be slow (any but a list known up front: a source service over HTTP) is asked in a
task of its own, which the asker waits on for one status interval at most. One that takes longer is
noted as a wait (reason SourcePending, naming the source) and left running, so the engine writes
status meanwhile and a hanging source shows at once; the engine's loop is woken when it answers. A
source with no item ready for a status interval is noted the same way. The wait ends with an item.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Sequence

from agentpool.api.reasons import Reason
from agentpool.runs.items import ItemKeys, Named
from agentpool.runs.shared import RunShared
from agentpool.runs.sources import DONE, NOT_READY, Batch, ItemSource, ListSource, Pulled, Signal
from agentpool.settings import RunSettings

SOURCE = "source"
"""The subject of the source's waits."""


class Intake:
    """The run's side of its source."""

    def __init__(
        self,
        source: ItemSource,
        shared: RunShared,
        *,
        id_field: str | None = None,
        settings: RunSettings | None = None,
        cap: int = 1,
    ) -> None:
        settings = settings or RunSettings()
        ledger = shared.ledger
        self._cap = cap
        self._batch_max = max(1, settings.source_batch_max)
        self._ledger = ledger
        self._poll_first = settings.source_poll_first_seconds
        self._poll_max = settings.source_poll_max_seconds
        self._source = source
        self._id_field = id_field
        # Made-up keys avoid every real id: all of a list's, and those an HTTP source gave.
        self._keys = ItemKeys.of(
            source.items if isinstance(source, ListSource) else None, id_field=id_field
        )
        self._next_index = 0
        if not source.replayable:
            # A source that does not give its items again goes on where it was, and what it
            # gave before an operator restart keeps its keys.
            self._keys.resume(recorded=ledger.recorded, made_up=ledger.made_up.keys())
            self._next_index = ledger.seen
        self._clock = shared.clock
        self._waiting = shared.waiting
        # A source slow to answer is waited on for one status interval before the run says so.
        self._patience = settings.status_interval_seconds
        self._wake = shared.wake
        # A list known up front answers at once: no task, no wait.
        self._slow = not isinstance(source, ListSource)
        self._source_done = False
        self._batch: deque[Named] = deque()
        """Items of the last answer, named, not handed out yet."""
        self.next_poll = 0.0
        """When the source, having had nothing ready, may be asked again."""
        self._delay = self._poll_first
        self._asking = False
        self._request: asyncio.Task[Pulled | Batch | Signal] | None = None
        self._awaited = False
        """Someone waited on :attr:`_request` for the patience already."""
        # The run has been waiting for the source since the first request without an item.
        self._waiting_since_noted = False

    @property
    def done(self) -> bool:
        """The source said it has no more items, and every item it gave is handed out."""
        return self._source_done and not self._batch

    def room(self, *, taking: int = 0) -> int:
        """How many items the next request may bring: twice cap less those in flight (and
        ``taking``, handed out and about to start), so that up to cap wait ahead of the lanes;
        at least one."""
        held = self._ledger.attempts.active + taking
        return max(1, min(self._batch_max, 2 * self._cap - held))

    async def take(self, active: Sequence[str], now: float) -> Named | None:
        """The source's next item, named; None when there is none now: the source is done, has
        nothing ready, is still answering, or another lane is asking it. Raises the source's
        SourceError."""
        if not self._batch:
            await self._pull(active, now)
        if not self._batch:
            return None
        named = self._batch.popleft()
        if not self._batch:
            self._ask_ahead([*active, named.key], now)
        return named

    def _ask_ahead(self, active: Sequence[str], now: float) -> None:
        """The batch's last item is handed out: ask for the next one now, while the lanes are
        busy, so that a lane that frees finds items waiting rather than a request to make."""
        if self._slow and not self._source_done and self._request is None and now >= self.next_poll:
            self._send(active, taking=1)

    async def _pull(self, active: Sequence[str], now: float) -> None:
        """Ask the source, and name what it gives into the batch."""
        if self.done or self._asking or (self._request is None and now < self.next_poll):
            return
        self._asking = True
        try:
            pulled = await self._answer(active)
        finally:
            self._asking = False
        if pulled is None:
            return
        if pulled is NOT_READY:
            self.next_poll = now + self._delay
            self._delay = min(self._poll_max, self._delay * 2)
            self._note(f"{self._source.name} has no item ready yet", after=self._patience)
            return
        self._end_wait()
        if pulled is DONE:
            self._source_done = True
            return
        self._delay = self._poll_first
        if isinstance(pulled, Pulled):
            self._name(pulled.value)
            return
        assert isinstance(pulled, Batch)
        for value in pulled.values:
            self._name(value)
        self._source_done = pulled.done

    def _name(self, value: object) -> None:
        index = self._next_index
        self._next_index += 1
        self._batch.append(self._keys.name(value, index, id_field=self._id_field))

    async def _answer(self, active: Sequence[str]) -> Pulled | Batch | Signal | None:
        """The source's answer, or None while a slow one is still on its way."""
        if not self._slow:
            return await self._source.next(active, self.room())
        request = self._request or self._send(active)
        if not self._awaited:
            # The first to ask waits for the answer, up to the patience; later ones do not.
            self._awaited = True
            timer = asyncio.ensure_future(self._clock.sleep(self._patience))
            try:
                await asyncio.wait({request, timer}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                timer.cancel()
            if not request.done():
                self._note(f"{self._source.name} has not answered yet")
        if not request.done():
            return None
        self._request = None
        return request.result()

    def _send(
        self, active: Sequence[str], *, taking: int = 0
    ) -> asyncio.Task[Pulled | Batch | Signal]:
        """Ask the source, in a task of its own: :attr:`_request`."""
        if not self._waiting_since_noted:
            # From now on, shown once it has lasted the patience: a quick answer ends it.
            self._note(f"{self._source.name} has not answered yet", after=self._patience)
        request = asyncio.ensure_future(self._source.next(active, self.room(taking=taking)))
        request.add_done_callback(self._answered)
        self._request, self._awaited = request, False
        return request

    def _answered(self, request: asyncio.Task[Pulled | Batch | Signal]) -> None:
        answered = not request.cancelled() and request.exception() is None
        if answered and isinstance(request.result(), Pulled | Batch):
            # It answered: an answer asked ahead may wait a while for a lane to take it.
            self._end_wait()
        self._wake()

    def _note(self, message: str, *, after: float = 0.0) -> None:
        self._waiting_since_noted = True
        self._waiting.begin(SOURCE, Reason.SOURCE_PENDING, message, after=after)

    def _end_wait(self) -> None:
        self._waiting_since_noted = False
        self._waiting.end(SOURCE)

    def poke(self) -> None:
        """The run's active items changed: a source with nothing ready may have something now."""
        self.next_poll = 0.0
        self._delay = self._poll_first

    async def close(self) -> None:
        """Stop a request on its way, and close the source."""
        if self._request is not None:
            self._request.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._request
            self._request = None
        await self._source.close()
