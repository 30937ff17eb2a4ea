"""The Events that say how the pool's size changed in one reconcile pass, counted as it happened.

:func:`size_events` is pure: the AgentPool reconciler calls it after a pass with how many live
agents it started from, how many it retired (and how many of those for scale-down) and how many
pods it managed to create, and posts what it returns. Each message names the sizes before and
after, never the size the plan aimed at, so a pod that could not be created or a busy agent that
outlives a lowered maxSize is not reported as gone or there.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentpool.api.reasons import EventReason


@dataclass(frozen=True, slots=True)
class SizeEvent:
    """One Event to post on the pool: its reason (one CamelCase word) and its message."""

    reason: str
    message: str


def size_events(
    *, before: int, retired: int, scaled_down: int, created: int, waiting: int
) -> tuple[SizeEvent, ...]:
    """AgentReplaced, ScaledUp and ScaledDown, each only if it happened.

    `before` counts the live agents the pass started from; `retired` the agents it took out,
    `scaled_down` of them for idle timeout or a lowered maxSize; `created` the pods it created.
    A created pod first replaces an agent retired for another reason; the rest grow the pool.
    """
    replaced = min(created, retired - scaled_down)
    grown = created - replaced
    after = before - retired + created
    events = []
    if replaced:
        what = "a retired one" if replaced == 1 else "retired ones"
        message = f"Created {_agents(replaced)} to replace {what}"
        events.append(SizeEvent(str(EventReason.AGENT_REPLACED), message))
    if grown:
        message = f"Scaled up from {after - grown} to {_agents(after)}"
        if waiting:
            checkouts = "checkout" if waiting == 1 else "checkouts"
            message += f" for {waiting} waiting {checkouts}"
        events.append(SizeEvent(str(EventReason.SCALED_UP), message))
    if scaled_down:
        start = before - (retired - scaled_down) + replaced
        message = f"Scaled down from {start} to {_agents(start - scaled_down)}"
        events.append(SizeEvent(str(EventReason.SCALED_DOWN), message))
    return tuple(events)


def _agents(count: int) -> str:
    return f"{count} agent" if count == 1 else f"{count} agents"
