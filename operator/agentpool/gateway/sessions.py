"""Sessions of an HTTP pool: which agent each session's requests go to, and when a session ends.

A pool that names a session header (``spec.sessions``) pins a session to the agent whose answer
began it, holding one of its slots; later requests with the session's id go straight to that
agent. :class:`SessionTable` keeps the sessions by (namespace, pool, id), each with what the
operator holds for it, how many of its requests are in flight, and when it was last used; it
says which sessions have been idle past their timeout. A session ended (a ``DELETE``, its
agent's loss) while other requests of it are still in flight gives back its agent only once
the last of them is over, so the agent never takes more than its slots. Pure bookkeeping over
an injected clock: the operator's gateway calls hold and give back the agents.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")
#: (namespace, pool, session id).
SessionKey = tuple[str, str, str]


@dataclass(slots=True)
class _Session(Generic[T]):
    held: T
    idle_timeout: float
    last_used: float
    in_flight: int = 0


@dataclass
class SessionTable(Generic[T]):
    """Open sessions and what each holds."""

    clock: Callable[[], float]
    _open: dict[SessionKey, _Session[T]] = field(default_factory=dict)
    #: Sessions ended while requests of theirs were still in flight, until the last is over.
    _ending: dict[SessionKey, _Session[T]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self._open)

    def begin(self, key: SessionKey, held: T, *, idle_timeout: float) -> bool:
        """Open ``key`` holding ``held``; False when it is open already (an agent that named an
        id in use: the session stays with the agent that began it)."""
        if key in self._open or key in self._ending:
            return False
        self._open[key] = _Session(held, idle_timeout, self.clock())
        return True

    def use(self, key: SessionKey) -> T | None:
        """What ``key`` holds, counting a request in flight until :meth:`used`; None when no
        such session is open."""
        session = self._open.get(key)
        if session is None:
            return None
        session.in_flight += 1
        session.last_used = self.clock()
        return session.held

    def used(self, key: SessionKey) -> T | None:
        """A request of ``key`` is over; its idle time starts now. When ``key`` has ended and
        this was its last request in flight, what it held, now free."""
        session = self._open.get(key)
        if session is not None:
            session.in_flight = max(0, session.in_flight - 1)
            session.last_used = self.clock()
            return None
        ending = self._ending.get(key)
        if ending is None:
            return None
        ending.in_flight -= 1
        if ending.in_flight > 0:
            return None
        del self._ending[key]
        return ending.held

    def end(self, key: SessionKey) -> tuple[T, bool] | None:
        """Close ``key``: no request finds it from now on. What it held, and whether that is
        free now; while requests of it are still in flight it is not, and the last one's
        :meth:`used` gives it back. None when ``key`` was not open."""
        session = self._open.pop(key, None)
        if session is None:
            return None
        if session.in_flight > 0:
            self._ending[key] = session
            return session.held, False
        return session.held, True

    def idle(self) -> list[tuple[SessionKey, T]]:
        """Close every session with no request in flight that has gone its idle timeout
        without one; what each held."""
        now = self.clock()
        ended = [
            key
            for key, session in self._open.items()
            if session.in_flight == 0 and now - session.last_used >= session.idle_timeout
        ]
        return [(key, self._open.pop(key).held) for key in ended]
