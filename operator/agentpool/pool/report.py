"""What the AgentPool reconciler reports after a pass: the status body, its metrics, when to write.

:func:`agentpool.pool.compute_status` decides what the pool's status says; this module puts that
view in wire form (:func:`status_body`), samples demand for the sizing advice
(:func:`sample_demand`), counts agents by state for the metrics (:func:`agent_states`) and
decides whether a status is written now, later or not at all (:func:`write_delay`). Called by
:mod:`agentpool.handlers.poolstatus`; pure, with ``now`` given.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

from agentpool.api import AgentPoolStatus, Recommendation
from agentpool.pool.observed import ObservedAgent
from agentpool.pool.policy import PoolPolicy
from agentpool.pool.sizing import DemandSample
from agentpool.pool.status import PoolStatusView

#: The states agents are counted by in the ``agents`` gauge, every one reported even at 0.
AGENT_STATES = ("idle", "busy", "starting", "unready", "retiring")


def sample_demand(
    history: Sequence[DemandSample],
    *,
    busy: int,
    waiting: int,
    slots: int = 1,
    now: float,
    every: float,
    window: float,
    quiet: bool = False,
) -> list[DemandSample]:
    """The demand history with a sample taken at ``now`` when ``every`` seconds passed since the
    last, and samples older than ``window`` dropped; unchanged otherwise. ``busy`` and
    ``waiting`` count slots, ``slots`` to an agent.

    ``quiet`` says the pool was steady since the last pass, its passes far apart: no slot was
    busy and none waited until this pass (a quiet pool's first checkout wakes it), so the
    samples its passes would have taken every ``every`` seconds are filled in at no demand, up
    to ``now``, and the demand of this very moment is left to the next samples: sampled at
    each wake-up, a pool busy 3 % of the time would look busy all the time."""
    if history and now - history[-1].at < every:
        return list(history)
    if quiet and history:
        filled = []
        at = max(history[-1].at, now - window)
        while (at := at + every) <= now:
            filled.append(DemandSample(at=at, busy=0, waiting=0, slots=slots))
        sampled = [*history, *filled]
    else:
        sampled = [*history, DemandSample(at=now, busy=busy, waiting=waiting, slots=slots)]
    return [sample for sample in sampled if now - sample.at <= window]


def status_body(
    view: PoolStatusView,
    policy: PoolPolicy,
    *,
    selector: str,
    generation: int | None,
    open_schedules: Sequence[str] = (),
) -> dict[str, Any]:
    """The pool's status in wire form, conditions aside (they are stamped by the handler);
    ``policy`` carries the minSize and minIdle in force, ``open_schedules`` the windows that
    raised them."""
    advice, cold_start = view.recommendation, view.cold_start_seconds
    return AgentPoolStatus(
        replicas=view.replicas,
        ready_replicas=view.ready_replicas,
        updated_replicas=view.updated_replicas,
        available=view.available,
        busy=view.busy,
        slots=view.slots,
        busy_slots=view.busy_slots,
        overflow=view.overflow,
        max_size=policy.max_size,
        waiting=view.waiting,
        state=view.state,
        selector=selector,
        observed_generation=generation,
        recommendation=(
            None
            if advice is None
            else Recommendation(min_size=advice.min_size, max_size=advice.max_size)
        ),
        cold_start_seconds=None if cold_start is None else round(cold_start, 3),
        effective_min_size=policy.min_size,
        effective_min_idle=policy.min_idle,
        open_schedules=",".join(open_schedules) or None,
    ).to_wire()


def agent_states(agents: Iterable[ObservedAgent], *, kept: Collection[str]) -> dict[str, int]:
    """How many agents are in each of :data:`AGENT_STATES`; a failed pod kept for a post-mortem
    is no longer an agent and is left out."""
    states = dict.fromkeys(AGENT_STATES, 0)
    for agent in agents:
        if agent.name in kept:
            continue
        if agent.deleting:
            states["retiring"] += 1
        elif agent.busy:
            states["busy"] += 1
        elif agent.idle:
            states["idle"] += 1
        elif agent.pending:
            states["starting"] += 1
        else:
            states["unready"] += 1
    return states


def write_delay(
    status: dict[str, Any],
    *,
    last: dict[str, Any] | None,
    since_last: float,
    interval: float,
) -> float | None:
    """Whether to write ``status``: None when it says what was last written, 0 to write it now,
    else the seconds to wait so that writes come at most once per ``interval``."""
    if status == last:
        return None
    if since_last < interval:
        return interval - since_last
    return 0.0
