"""What the PoolRun engine needs from the rest of the operator, as protocols and exceptions.

The engine knows nothing of Kubernetes, kopf or HTTP to agents: the kopf daemon that wraps a
PoolRun hands it a dispatcher (the broker's checkout and checkin, and the agent client's call),
a status sink (merge patches to the run's status, result ConfigMaps, Events) and a clock. Each is
matched by structure, so the tests pass fakes and the daemon passes the real ones. How a
checkout ends (:class:`~agentpool.pool.checkin.CheckinOutcome`, and the errors of one that got no
agent) is said in :mod:`agentpool.pool.checkin`, in the same words the broker uses.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from agentpool.api import RawRunStatus
from agentpool.pool.checkin import CheckinOutcome, CheckoutFailed
from agentpool.wire.envelopes import EnvelopeBody


class HeldAgent(Protocol):
    """An agent handed to one item until it is checked back in."""

    @property
    def agent(self) -> str:
        """The agent's name (its pod), recorded with a failure."""
        ...


class Waiting(Protocol):
    """Where a checkout notes what it waits for, while it waits (:mod:`agentpool.runs.waits`):
    ``subject`` names the thing waited for (``pool/<name>``), ``reason`` is one CamelCase word
    and ``message`` a sentence for the run's Waiting condition."""

    def begin(
        self, subject: str, reason: str, message: str, *, after: float = 0.0, timed: bool = True
    ) -> None: ...

    def end(self, subject: str) -> None: ...


@dataclass(frozen=True, slots=True)
class CheckoutTerms:
    """What a run's checkouts from one pool ask for. They are the same for every item of that
    pool, so the run makes them once per pool and hands the same value to every checkout."""

    pool: str
    """The AgentPool the agent comes from."""
    timeout: float
    """Seconds a checkout waits for an agent before it fails."""
    priority: int
    """The run's priority: waiters of a higher one are served first."""
    holder: str
    """Who holds the agent while it is checked out: the run's name."""
    speaks: str = "Agentpool"
    """The protocol the run speaks to the pool's agents: HTTP for a run with spec.request. A
    pool that serves the other refuses the checkout with :class:`ProtocolMismatch`."""

    def at_once(self) -> CheckoutTerms:
        """The same terms for an agent that is free at once, or none."""
        return replace(self, timeout=0.0)


@dataclass(frozen=True, slots=True)
class ItemRequest:
    """One item as a request to an HTTP pool's agent, the same on every attempt
    (:func:`agentpool.runs.requests.build_request`)."""

    method: str
    path: str
    """The path and query, as spec.request gives them."""
    headers: tuple[tuple[str, str], ...]
    body: bytes


class ProtocolMismatch(CheckoutFailed):
    """The pool serves another protocol than the run speaks to it, so none of its agents can
    take the run's items; the message says which field to change
    (:func:`agentpool.runs.requests.mismatch`)."""


class Dispatcher(Protocol):
    """The pools as a run sees them: check an agent out, hand it an item, give it back."""

    async def checkout(self, terms: CheckoutTerms, *, waiting: Waiting | None = None) -> HeldAgent:
        """An agent of ``terms.pool``; raises ``PoolNotFound``, ``ProtocolMismatch`` (the pool
        serves another protocol than the run speaks) or another ``CheckoutFailed``.

        While the pool is not there, the checkout says so through ``waiting``, at once.
        """
        ...

    async def checkin(self, checkout: HeldAgent, outcome: CheckinOutcome) -> None:
        """Return the agent to its pool."""
        ...

    async def invoke(
        self, checkout: HeldAgent, envelope: EnvelopeBody, *, timeout: float, cast: bool
    ) -> AttemptResult:
        """Hand ``envelope`` to the checked-out agent (``POST /invoke``) and say what came of it."""
        ...

    async def send(
        self, checkout: HeldAgent, request: ItemRequest, *, timeout: float, attempt: int
    ) -> AttemptResult:
        """Send ``request`` to the checked-out agent of an HTTP pool and say what its answer
        came to (:func:`agentpool.runs.requests.read_answer`)."""
        ...


class AttemptResult(Protocol):
    """What one attempt of one item came to."""

    @property
    def ok(self) -> bool: ...
    @property
    def output(self) -> Any: ...
    @property
    def reason(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def lost(self) -> bool:
        """The agent's state is unknown (timed out, connection broken): it must not be reused."""
        ...


class StatusSink(Protocol):
    """Where a run's progress goes: the run object's status, its result ConfigMaps, its Events."""

    async def write(self, patch: RawRunStatus) -> None:
        """Apply a JSON merge patch to the run's ``status``."""
        ...

    async def write_results_configmap(self, name: str, data: dict[str, str]) -> None:
        """Create or replace a ConfigMap owned by the run with exactly ``data``."""
        ...

    async def event(self, type: str, reason: str, message: str) -> None:
        """Post an Event on the run (``type`` is ``Normal`` or ``Warning``)."""
        ...


class Journal(Protocol):
    """Where finished items go the moment they are recorded, to outlive an operator crash.

    The engine appends each result; before a status write it seals what is there, and once the
    write succeeded it releases it; after a restart it reads back what no write holds yet.
    """

    def load(self) -> list[Mapping[str, Any]]:
        """Entries still held, oldest first: ``{"id", "attempt", "index"}`` when an item starts,
        ``{"id", "unstarted"}`` when no agent could be had for it after all, and ``{"id",
        "output"}`` or ``{"id", "failure"}`` when it is recorded, ``{"id", "moved"}`` when a
        made-up key's record moves aside (:mod:`agentpool.runs.journaling` writes and reads
        them)."""
        ...

    def append(self, entry: str) -> None:
        """Add an entry, one JSON object as :func:`~agentpool.runs.journaling.encode_entry`
        writes it; it is safe from a crash once :meth:`flush` returns."""
        ...

    def flush(self) -> None: ...

    def seal(self) -> int:
        """Close off what is there for the next status write; returns the mark to release."""
        ...

    def release(self, mark: int) -> None:
        """A status write holds everything up to ``mark``."""
        ...

    def discard(self) -> None:
        """The run is over and its status holds everything."""
        ...

    def close(self) -> None: ...


class Clock(Protocol):
    """Wall-clock time and sleeping, injected so tests run on a fake clock."""

    def now(self) -> float:
        """Seconds since the epoch."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))
