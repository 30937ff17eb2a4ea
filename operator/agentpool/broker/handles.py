"""A checked-out agent as its holder sees it, and how a holder reports the checkout's outcome.

`Broker.checkout` returns a `Checkout`; the holder calls the agent at `endpoint` and hands the
`Checkout` back to `Broker.checkin` with a `CheckinOutcome`. If the agent's pod dies while held, the
broker sets `lost` on the handle, so a holder waiting on a call can stop at once instead of
waiting for its call timeout.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable


@dataclasses.dataclass(slots=True, eq=False, kw_only=True)
class Checkout:
    """One agent held by one holder, from checkout until checkin.

    `serial` numbers every checkout of the broker, so a stale handle (checked in twice, or kept
    after its agent was lost) can never act on a later checkout of the same agent. Handles
    compare by identity: two checkouts of one agent are never the same.
    """

    pool: str
    agent: str
    ip: str | None
    port: int
    holder: str
    serial: int
    lost_reason: str | None = dataclasses.field(default=None, init=False)
    waited: bool = dataclasses.field(default=False, init=False)
    """The checkout found no agent free and waited for one (a scale-up, or a busy pool)."""
    _lost: asyncio.Event = dataclasses.field(default_factory=asyncio.Event, init=False, repr=False)
    _on_lost: list[Callable[[], None]] = dataclasses.field(
        default_factory=list, init=False, repr=False
    )

    @property
    def endpoint(self) -> str:
        """The agent's base URL, `http://IP:PORT`."""
        return f"http://{self.ip}:{self.port}"

    @property
    def is_lost(self) -> bool:
        """The agent's pod died or vanished while this checkout held it."""
        return self._lost.is_set()

    async def wait_lost(self) -> str:
        """Wait until the agent is lost; returns why. Holders race this against their call."""
        await self._lost.wait()
        return self.lost_reason or "agent lost"

    def on_lost(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` when the agent is lost (at once if it is); returns its remover.

        Cheaper than a task on :meth:`wait_lost` for a holder that races every call.
        """
        if self._lost.is_set():
            callback()
            return _nothing
        self._on_lost.append(callback)

        def remove() -> None:
            if callback in self._on_lost:
                self._on_lost.remove(callback)

        return remove

    def mark_lost(self, reason: str) -> None:
        """Tell the holder its agent is gone (the broker calls this)."""
        if not self._lost.is_set():
            self.lost_reason = reason
            self._lost.set()
            callbacks, self._on_lost = self._on_lost, []
            for callback in callbacks:
                callback()


def _nothing() -> None:
    return None
