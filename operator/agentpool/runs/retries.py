"""When a failed item is tried again, and the items waiting for that.

An attempt that failed is followed by another after a back-off (``backoffSeconds``, doubling with
each further attempt), up to ``maxAttempts``; after the last the item fails for good. An agent that
refused the operator's own token costs the item no attempt: it waits a short, growing delay (up to
the run settings' ``refused_max_seconds``) for another agent. :func:`after_failure` and
:func:`after_refusal` decide, purely; :class:`Retries` holds the items until they are due (the
engine's feed puts those due back at the front of its backlog, and the engine wakes at
:meth:`Retries.next_due`) and records the failures that are final.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, InitVar, dataclass, field

from agentpool.runs.backlog import Work
from agentpool.runs.config import RunConfig
from agentpool.runs.contracts import Clock
from agentpool.runs.journaling import Recorder
from agentpool.runs.reporting import Reporter
from agentpool.runs.shared import RunShared


def after_failure(
    work: Work, agent: str, *, max_attempts: int, backoff_seconds: float, now: float
) -> tuple[float, Work] | None:
    """When ``work``'s next attempt is due, and that attempt; None when it had its last."""
    if work.attempt >= max_attempts:
        return None
    retry = work.retried(agent)
    # The first retry waits backoffSeconds, each further one twice as long.
    return now + backoff_seconds * 2 ** (retry.attempt - 2), retry


def after_refusal(work: Work, agent: str, *, now: float, most: float) -> tuple[float, Work]:
    """When ``work`` is tried again on another agent, with its attempt unchanged."""
    retry = work.refused_by(agent)
    return now + min(most, 0.1 * 2 ** (retry.refused - 1)), retry


@dataclass(slots=True, eq=False, repr=False)
class Retries:
    """The items waiting for their next attempt, each with the time it is due."""

    config: RunConfig
    shared: InitVar[RunShared]
    _: KW_ONLY
    report: Reporter
    refused_max: float
    records: Recorder = field(init=False)
    clock: Clock = field(init=False)
    wake: Callable[[], None] = field(init=False)
    """Called for each retry added: the engine's loop arms its timer."""
    _waiting: list[tuple[float, Work]] = field(default_factory=list, init=False)

    def __post_init__(self, shared: RunShared) -> None:
        self.records, self.clock, self.wake = shared.records, shared.clock, shared.wake

    def __bool__(self) -> bool:
        return bool(self._waiting)

    def failed(self, work: Work, agent: str, reason: str, message: str) -> None:
        """``agent`` failed ``work``'s attempt: it goes again after its back-off, or, after its
        last attempt, fails for good."""
        config = self.config
        retry = after_failure(
            work,
            agent,
            max_attempts=config.spec.max_attempts,
            backoff_seconds=config.spec.backoff_seconds,
            now=self.clock.now(),
        )
        if retry is not None:
            self.records.await_retry(work.key)
            self._waiting.append(retry)
            self.wake()
            return
        self.records.failure(
            work.key, reason=reason, message=message, attempts=work.attempt, agent=agent
        )
        self.report.item_failed(work.key, reason, message)

    def refused(self, work: Work, agent: str) -> None:
        """``agent`` refused the operator's own token (it holds another): that is for the
        operator to mend, not a failure of the item. The agent is retired (the pool replaces
        it) and the item waits for another, with its attempt unchanged."""
        self._waiting.append(
            after_refusal(work, agent, now=self.clock.now(), most=self.refused_max)
        )
        self.wake()
        self.report.agent_refused(agent, work.key)

    def take_due(self, now: float) -> list[Work]:
        """The items due at ``now``, in the order they came; they wait no more."""
        if not self._waiting:
            return []
        due = [work for at, work in self._waiting if at <= now]
        if due:
            self._waiting = [entry for entry in self._waiting if entry[0] > now]
        return due

    def next_due(self) -> float | None:
        """When the next item is due, or None when none waits."""
        return min((at for at, _ in self._waiting), default=None)
