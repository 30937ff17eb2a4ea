"""Agents whose container runs but whose readiness probe keeps failing, and what the pool says.

An agent that never turns Ready (it listens on another port than its probe asks, say) was
reported only once progressDeadlineSeconds had passed (AgentsNotReady). A kubelet says why on
the pod as soon as a probe fails: a Warning Event ``Unhealthy`` with the probe's own words. This
module decides when such an agent is worth a Degraded condition (its container has run for
longer than :func:`probe_threshold` without turning Ready), which agents those are
(:func:`failing_agents`), whether the pool lists its namespace's Unhealthy Events now
(:func:`events_due`, only while some agent is past the threshold, so a healthy pool costs
nothing), what the newest Event of each agent says (:func:`probe_errors`) and the condition
itself (:func:`probe_failure_condition`), which :func:`with_probe_failures` puts in place of a
Degraded that said nothing was wrong. The AgentPool status writer
(:mod:`agentpool.handlers.poolstatus`) lists the Events and calls these; pure, with ``now``
given.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence

from agentpool.api.conditions import ConditionView
from agentpool.api.raw import RawEvent
from agentpool.api.reasons import ConditionType, Reason
from agentpool.pool.observed import ObservedAgent
from agentpool.pool.status import NAMED_PODS

#: The Events a kubelet posts on a failed probe attempt: what the pool lists.
UNHEALTHY_EVENTS = "involvedObject.kind=Pod,reason=Unhealthy"


def probe_threshold(cold_start: float | None, *, deadline: float, floor: float) -> float:
    """Seconds an agent's container may run without turning Ready before the pool says so:
    twice the pool's measured cold start (pod created to Ready), at least ``floor`` (an agent
    with an expensive start-up answers 503 for a while, and the pool's first agents have no
    cold start measured yet), and never past the pool's ``progressDeadlineSeconds``, where
    AgentsNotReady takes over. Whole seconds, so the message does not flicker."""
    wanted = max(floor, 2 * cold_start) if cold_start is not None else floor
    return float(math.ceil(min(deadline, wanted)))


def failing_agents(
    agents: Iterable[ObservedAgent], *, now: float, threshold: float
) -> list[ObservedAgent]:
    """The agents never Ready whose container has been running for ``threshold`` seconds or
    more, oldest container first: their readiness probe is what holds them back."""
    failing = [
        agent
        for agent in agents
        if agent.pending
        and agent.running_since is not None
        and agent.waiting_reason is None
        and now - agent.running_since >= threshold
    ]
    return sorted(failing, key=lambda agent: (agent.running_since or 0.0, agent.name))


def events_due(failing: bool, *, listed_at: float | None, now: float, every: float) -> bool:
    """Whether to list the Unhealthy Events now: only while some agent is ``failing``, and at
    most once ``every`` seconds."""
    return failing and (listed_at is None or now - listed_at >= every)


def probe_errors(events: Iterable[RawEvent], *, agents: Iterable[str]) -> dict[str, str]:
    """The newest Unhealthy message of each of ``agents``, from its pods' Events (readiness
    failures before liveness ones, then the latest seen)."""
    wanted = set(agents)
    newest: dict[str, tuple[tuple[bool, str], str]] = {}
    for event in events:
        involved = event.get("involvedObject") or {}
        name = involved.get("name")
        if involved.get("kind") != "Pod" or name not in wanted:
            continue
        message = str(event.get("message") or "").strip()
        if not message:
            continue
        seen = str(event.get("lastTimestamp") or event.get("eventTime") or "")
        rank = (message.startswith("Readiness probe"), seen)
        if name not in newest or rank >= newest[name][0]:
            newest[name] = (rank, message)
    return {name: message for name, (_, message) in newest.items()}


def last_probe_error(
    failing: Sequence[ObservedAgent], errors: Mapping[str, str]
) -> tuple[str, str] | None:
    """The first of the ``failing`` agents that an Unhealthy Event told about, and its words."""
    return next(((a.name, errors[a.name]) for a in failing if a.name in errors), None)


def probe_failure_condition(
    failing: Sequence[ObservedAgent], errors: Mapping[str, str], *, threshold: float
) -> ConditionView:
    """Degraded, reason ReadinessFailing: the agents running for over ``threshold`` seconds
    without turning Ready (at most five named, the rest counted) and the last probe error one
    of them reported, or where to look while none is known."""
    names = [agent.name for agent in failing]
    shown = ", ".join(names[:NAMED_PODS])
    more = len(names) - NAMED_PODS
    named = shown + (f" and {more} more" if more > 0 else "")
    if len(names) == 1:
        lead = f"agent {named} has run for over {threshold:g}s without turning Ready"
    else:
        lead = (
            f"{len(names)} agents have run for over {threshold:g}s without turning Ready: {named}"
        )
    told = last_probe_error(failing, errors)
    if told is None:
        why = f"no Unhealthy Event says why yet: kubectl describe pod {names[0]}"
    elif len(names) == 1:
        why = told[1]
    else:
        why = f"{told[0]}: {told[1]}"
    return ConditionView(
        str(ConditionType.DEGRADED), "True", str(Reason.READINESS_FAILING), f"{lead}; {why}"
    )


def with_probe_failures(
    conditions: Iterable[ConditionView],
    failure: ConditionView | None,
    *,
    told: tuple[str, str] | None = None,
) -> list[ConditionView]:
    """The conditions with ``failure``, if any, in place of a Degraded that says False: any
    other trouble (a crash loop, a refused pod) says more. Past progressDeadlineSeconds,
    AgentsNotReady stays, with the probe error ``told`` (agent, words) added to its message."""
    if failure is None:
        return list(conditions)
    return [_with_failure(cond, failure, told) for cond in conditions]


def _with_failure(
    cond: ConditionView, failure: ConditionView, told: tuple[str, str] | None
) -> ConditionView:
    if cond.type != ConditionType.DEGRADED:
        return cond
    if cond.status != "True":
        return failure
    if cond.reason == Reason.AGENTS_NOT_READY and told is not None:
        message = f"{cond.message}; last probe error, of {told[0]}: {told[1]}"
        return dataclasses.replace(cond, message=message)
    return cond
