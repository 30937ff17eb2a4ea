"""Automatic headroom: minIdle that follows the pool's own sizing advice, without flapping.

With ``spec.headroom.mode: Auto`` the AgentPool reconciler keeps minIdle at the gap between
the peak and the median demand it has observed (:mod:`agentpool.pool.sizing`): the idle agents
that would have met the peaks warm. It moves the way a HorizontalPodAutoscaler moves replicas:
advice within ``tolerance`` of the current value changes nothing; a rise follows the lowest
advice of the scale-up stabilization window and a fall the highest of the scale-down one; and
the value moves at most ``maxStepPerMinute`` in any 60 seconds. The bounds (spec.minIdle or an
open schedule's below, maxSize - minSize above) apply at once. Everything here is pure: the
reconciler keeps the :class:`HeadroomState` between passes and passes ``now`` in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentpool.api import Headroom

#: The rate limit's period, as ``maxStepPerMinute`` says.
MINUTE = 60.0


@dataclass(frozen=True, slots=True)
class HeadroomState:
    """What the decision remembers: the minIdle in force, the advice seen lately, and the
    changes made in the last minute (when, by how much)."""

    min_idle: int | None = None
    advice: tuple[tuple[float, int], ...] = ()
    changes: tuple[tuple[float, int], ...] = field(default=())


@dataclass(frozen=True, slots=True)
class HeadroomDecision:
    """The minIdle to keep now, the state to remember, and, when it changed, why."""

    min_idle: int
    state: HeadroomState
    message: str | None = None
    """A sentence with the figures the change came from; None when nothing changed."""


def restored_state(stored_min_idle: object, now: float) -> HeadroomState:
    """What a restarted operator starts from: the minIdle in force that the pool's status last
    showed (``status.effectiveMinIdle``), held as advice seen at ``now`` so that the scale-down
    stabilization window runs before anything lower is followed, as it would have had the
    operator kept running. Nothing usable in status: the state of a new pool."""
    if isinstance(stored_min_idle, bool) or not isinstance(stored_min_idle, int):
        return HeadroomState()
    if stored_min_idle < 0:
        return HeadroomState()
    return HeadroomState(min_idle=stored_min_idle, advice=((now, stored_min_idle),))


def desired_min_idle(*, peak_demand: int, median_demand: int) -> int:
    """The advice: the idle agents that would have met the observed peak warm."""
    return max(0, peak_demand - median_demand)


def decide_headroom(
    headroom: Headroom,
    state: HeadroomState,
    *,
    advice: int | None,
    floor: int,
    ceiling: int,
    now: float,
) -> HeadroomDecision:
    """minIdle at ``now``: ``advice`` (None while there is none yet) followed within
    ``floor``..``ceiling`` as ``headroom`` allows, from what ``state`` remembers."""
    ceiling = max(floor, ceiling)
    current = state.min_idle if state.min_idle is not None else floor
    if headroom.mode != "Auto":
        return HeadroomDecision(floor, HeadroomState())
    window = max(headroom.scale_up_stabilization_seconds, headroom.scale_down_stabilization_seconds)
    seen = tuple((at, value) for at, value in state.advice if now - at < window)
    if advice is not None:
        seen = (*seen, (now, _clamp(advice, floor, ceiling)))
    changes = tuple((at, delta) for at, delta in state.changes if now - at < MINUTE)
    bounded = _clamp(current, floor, ceiling)  # the bounds apply at once, unlimited
    target = _target(headroom, seen, current=bounded, now=now)
    room = max(0, headroom.max_step_per_minute - sum(abs(delta) for _, delta in changes))
    step = max(-room, min(room, target - bounded))
    chosen = bounded + step
    if step:
        changes = (*changes, (now, step))
    message = None
    if chosen != current:
        message = (
            f"minIdle {current} -> {chosen}: advice {advice if advice is not None else 'none'}"
            f" (peak minus median demand), bounds {floor}..{ceiling},"
            f" at most {headroom.max_step_per_minute} a minute"
        )
    return HeadroomDecision(chosen, HeadroomState(chosen, seen, changes), message)


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def _target(
    headroom: Headroom, seen: tuple[tuple[float, int], ...], *, current: int, now: float
) -> int:
    """Where the stabilized advice points: up to the lowest advice of the scale-up window if
    all of it is above ``current``, down to the highest of the scale-down window if all of it
    is below; ``current`` when the advice is within the tolerance or the windows disagree."""
    up = [v for at, v in seen if now - at <= headroom.scale_up_stabilization_seconds]
    down = [v for at, v in seen if now - at <= headroom.scale_down_stabilization_seconds]
    if up and min(up) > current + headroom.tolerance:
        return min(up)
    if down and max(down) < current - headroom.tolerance:
        return max(down)
    return current
