"""What a pool remembers of its agents' troubles: pods refused, start-up failures, quarantines,
readiness lost, answers outside the agent protocol.

A pod the API server refuses to create makes creation back off and names the server's words in
the Degraded condition until a pod is created, or a dry run of a changed template passes. Four
more memories outlive the agents they are about. Agents that fail before they ever turn Ready,
in a row, make replacements back off (as CrashLoopBackOff does) and name their pods in the
Degraded condition; agents quarantined in a row make replacements back off too; an agent that
turned unready, retired in the same pass, keeps the pool Degraded for a while so that someone can
see it. Answers outside the agent protocol, several in a row across the pool's agents, make it
Degraded too: quarantine cannot catch agents that all fail alike, since it retires only one that
fails where the others succeed. The AgentPool reconciler keeps one :class:`PoolHealth` per pool
and replaces it with what these functions return (the agents' answers are noted by
:mod:`agentpool.handlers.checkins`); it also asks :func:`kept_since` whether a retired agent's pod
stays for a post-mortem. Pure: every function takes ``now``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agentpool.api.conditions import ConditionView
from agentpool.api.raw import RawBody
from agentpool.api.reasons import ConditionType, Reason, RetireReason
from agentpool.pool.backoff import Backoff, retry_delay
from agentpool.pool.pods import PodFailure, failed_at, failure_of, is_failed, is_terminal
from agentpool.pool.status import NAMED_PODS, start_failure_condition

#: Pod timestamps have whole seconds: a failure this close before the loop began may be new.
TIMESTAMP_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class OutsideAnswer:
    """An agent's answer that was not the agent protocol's (a ``BadResponse``)."""

    agent: str
    message: str
    at: float


@dataclass(frozen=True, slots=True)
class PoolHealth:
    """A pool's memory of its agents' troubles, replaced whole on every change."""

    #: Agents that failed before ever turning Ready, in a row.
    crash_failures: int = 0
    #: The latest of them (the Degraded condition names their pods), oldest first.
    start_failures: tuple[PodFailure, ...] = ()
    #: Until when replacements of agents failing at start-up wait.
    crash_backoff_until: float = 0.0
    #: Agents quarantined, in a row: their replacements back off as CrashLoopBackOff does.
    quarantine_backoff: Backoff = dataclasses.field(default_factory=Backoff)
    #: The last agent retired for turning unready, and when.
    last_unready: tuple[str, float] | None = None
    #: Pod creates refused (or failed) in a row: the next one waits as CrashLoopBackOff does.
    create_backoff: Backoff = dataclasses.field(default_factory=Backoff)
    #: The API server's words for the latest refused create, until a create succeeds.
    create_refusal: str | None = None
    #: Answers outside the agent protocol in a row, across the pool's agents: none in it since.
    outside_protocol: int = 0
    #: The latest of them: which agent, its client's message, and when.
    last_outside: OutsideAnswer | None = None

    def create_failed(self, message: str, now: float) -> PoolHealth:
        """A pod create (or its dry run) was refused at ``now`` with ``message``: the next one
        backs off."""
        return dataclasses.replace(
            self, create_backoff=self.create_backoff.failed(now), create_refusal=message
        )

    def create_passed(self) -> PoolHealth:
        """A pod was created, or the template's dry run passed: creates go ahead at once."""
        if self.create_refusal is None and not self.create_backoff.failures:
            return self
        return dataclasses.replace(self, create_backoff=Backoff(), create_refusal=None)

    def agent_ready(self) -> PoolHealth:
        """An agent turned Ready: the run of start-up failures is over (its back-off runs out)."""
        if not self.crash_failures and not self.start_failures:
            return self
        return dataclasses.replace(self, crash_failures=0, start_failures=())

    def creation_hold(self, now: float) -> float:
        """Seconds new agents still wait at ``now``; 0 when they may be created."""
        return max(
            self.crash_backoff_until - now,
            self.quarantine_backoff.hold(now),
            self.create_backoff.hold(now),
        )


def note_start_failure(
    health: PoolHealth,
    pod: RawBody | None,
    *,
    ever_ready: bool,
    loop_started_at: float,
    now: float,
    backoff_cap: float,
) -> PoolHealth:
    """Count a retired agent's pod that failed before it ever turned Ready, for back-off and
    Degraded; one that was Ready once ends the run instead."""
    if pod is None or not is_failed(pod):
        return health
    if ever_ready:
        return dataclasses.replace(health, crash_failures=0, start_failures=())
    failed = failed_at(pod)
    if failed is not None and failed < loop_started_at - TIMESTAMP_SECONDS:
        # A pod kept from before this loop began (an operator restart): counted back then.
        return health
    count = health.crash_failures + 1
    return dataclasses.replace(
        health,
        crash_failures=count,
        start_failures=(*health.start_failures[-(NAMED_PODS - 1) :], failure_of(pod)),
        crash_backoff_until=now + retry_delay(count, base=1.0, cap=backoff_cap),
    )


def note_retirement(health: PoolHealth, name: str, reason: str, now: float) -> PoolHealth:
    """Remember an agent retired for turning unready, and back off after a quarantine."""
    if reason == str(RetireReason.UNREADY):
        health = dataclasses.replace(health, last_unready=(name, now))
    if reason == str(RetireReason.QUARANTINED):
        health = dataclasses.replace(
            health, quarantine_backoff=health.quarantine_backoff.failed(now)
        )
    return health


def note_answer(
    health: PoolHealth, agent: str, *, outside: bool, message: str, now: float
) -> PoolHealth:
    """Count an agent's answer to a request of the protocol (``POST /invoke`` for a run's item
    or a gateway call, ``POST /bind`` for a lease): one ``outside`` the protocol lengthens the
    pool's run of them, whichever agent gave it; one in it (an output, or the protocol's own
    error such as HandlerError) ends the run. A call that got no answer says nothing either way
    and is not noted."""
    if outside:
        return dataclasses.replace(
            health,
            outside_protocol=health.outside_protocol + 1,
            last_outside=OutsideAnswer(agent, message, now),
        )
    if not health.outside_protocol and health.last_outside is None:
        return health
    return dataclasses.replace(health, outside_protocol=0, last_outside=None)


def speaks_outside(
    health: PoolHealth, now: float, *, threshold: int, memory_seconds: float
) -> bool:
    """Whether the pool's agents answer outside the protocol: ``threshold`` answers in a row
    (0: never judged), the latest within ``memory_seconds`` of ``now``, so that a pool fixed
    while no item comes turns healthy again on its own."""
    last = health.last_outside
    return (
        threshold > 0
        and health.outside_protocol >= threshold
        and last is not None
        and now - last.at < memory_seconds
    )


def outside_protocol_condition(last: OutsideAnswer, *, threshold: int) -> ConditionView:
    """Degraded OutsideProtocol: the agents answer something other than the protocol; the
    latest answer's words (which name the request and the protocol's page) and what to do.
    The count is the threshold, not the run's length, so the message stays put while items
    keep failing."""
    message = (
        f"{threshold} or more answers in a row from the pool's agents were outside the agent "
        f"protocol, the latest from agent {last.agent}: {last.message}. The agents do not speak "
        "the protocol on spec.port: serve it with the agent SDK (python -m agentpool.agent), or "
        "check that spec.port is the port the agent serves it on"
    )
    return ConditionView(str(ConditionType.DEGRADED), "True", str(Reason.OUTSIDE_PROTOCOL), message)


def kept_since(reason: str, pod: RawBody | None, now: float) -> float | None:
    """When a retired agent's pod failed, if it is kept for a post-mortem (it failed and its
    processes ended); None when it is deleted at once."""
    if reason == RetireReason.FAILED and pod is not None and is_terminal(pod):
        return failed_at(pod) or now
    return None


def degraded_trouble(
    health: PoolHealth,
    now: float,
    *,
    memory_seconds: float,
    outside_threshold: int = 0,
    outside_memory_seconds: float = 0.0,
) -> ConditionView | None:
    """The Degraded condition the pool's memory calls for, if any: a pod the API server refuses
    first (no agent can start at all), then start-up failures, then agents answering outside the
    protocol (``outside_threshold`` in a row, the latest within ``outside_memory_seconds``),
    then an agent that turned unready within the last ``memory_seconds``."""
    if health.create_refusal is not None:
        return create_failure_condition(health.create_refusal, health.create_backoff.failures)
    if health.crash_failures and health.start_failures:
        return start_failure_condition(health.start_failures, count=health.crash_failures)
    if health.last_outside is not None and speaks_outside(
        health, now, threshold=outside_threshold, memory_seconds=outside_memory_seconds
    ):
        return outside_protocol_condition(health.last_outside, threshold=outside_threshold)
    if health.last_unready and now - health.last_unready[1] < memory_seconds:
        # An agent that turns unready is retired in the same pass; remember it for a while so
        # Degraded says so instead of flipping back before anyone can see it.
        message = f"agent {health.last_unready[0]} stopped passing its readiness probe"
        return ConditionView(
            str(ConditionType.DEGRADED), "True", str(Reason.READINESS_FAILING), message
        )
    return None


def create_failure_condition(message: str, count: int) -> ConditionView:
    """Degraded with reason CreateFailed: the API server's words and how often in a row (no
    countdown, which would rewrite the status on every pass)."""
    times = "once" if count <= 1 else f"{count} times in a row, backing off"
    text = (
        f"The API server refused the agent pod ({times}): {message}. The pod is made from the "
        "pool's spec.image and spec.template: fix the field the server names there, or the quota"
        " or admission policy it names"
    )
    return ConditionView(str(ConditionType.DEGRADED), "True", str(Reason.CREATE_FAILED), text)


def report_create_failure(failures: int) -> bool:
    """Whether the ``failures``-th refusal in a row gets a Warning Event: the 1st, 2nd, 4th,
    8th, ... so a pool refused for hours posts a handful, not one per attempt."""
    return failures >= 1 and failures & (failures - 1) == 0


def with_trouble(
    conditions: Iterable[ConditionView], trouble: ConditionView | None
) -> Sequence[ConditionView]:
    """The conditions with a Degraded that says False, or only that an agent's pod failed,
    replaced by ``trouble``, if any: what the pool remembers says more than a bare PodFailed.
    A refused create replaces any Degraded: no new agent starts until it is fixed."""
    if trouble is None:
        return list(conditions)
    overrides = trouble.reason == Reason.CREATE_FAILED
    return [
        trouble
        if cond.type == ConditionType.DEGRADED
        and (overrides or cond.status != "True" or cond.reason == Reason.POD_FAILED)
        else cond
        for cond in conditions
    ]
