"""Conditions and times as Kubernetes writes them, in one place for every kind and for the tests.

A condition's ``lastTransitionTime`` moves only when its status changes; every time on the wire
is RFC 3339 in UTC, to the second (``metav1.Time``) or to the microsecond (``metav1.MicroTime``).
The pure cores decide a condition's type, status, reason and message; these functions stamp it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from agentpool.api.base import Condition, ConditionStatus
from agentpool.api.raw import RawCondition

_SECONDS = "%Y-%m-%dT%H:%M:%SZ"
_MICROSECONDS = "%Y-%m-%dT%H:%M:%S.%fZ"


def format_time(moment: float | datetime) -> str:
    """``metav1.Time``: RFC 3339 in UTC to the second, from epoch seconds or a datetime."""
    return _utc(moment).strftime(_SECONDS)


def format_micro_time(moment: float | datetime) -> str:
    """``metav1.MicroTime``: RFC 3339 in UTC to the microsecond, as Leases and Events write it."""
    return _utc(moment).strftime(_MICROSECONDS)


def now_time() -> str:
    """The present as ``metav1.Time``."""
    return format_time(datetime.now(UTC))


def _utc(moment: float | datetime) -> datetime:
    if isinstance(moment, datetime):
        # A naive datetime is taken to be in UTC already, as the clocks here keep it.
        return moment if moment.tzinfo is None else moment.astimezone(UTC)
    return datetime.fromtimestamp(moment, UTC)


def condition_wire(condition: Condition) -> RawCondition:
    """``condition`` as it is written: the model's wire form, typed."""
    return cast(RawCondition, condition.to_wire())


@dataclass(frozen=True, slots=True)
class ConditionView:
    """A condition as a pure core decides it: before it is stamped with its transition time and
    the generation it reflects."""

    type: str
    status: ConditionStatus
    reason: str
    message: str


def stamp_condition(
    old: Mapping[str, Any] | None,
    cond: ConditionView,
    *,
    now: str,
    generation: int | None = None,
) -> RawCondition:
    """``cond`` in wire form, keeping ``old``'s transition time when its status held."""
    since = now
    if old is not None and old.get("status") == cond.status and old.get("lastTransitionTime"):
        since = old["lastTransitionTime"]
    entry: RawCondition = {
        "type": cond.type,
        "status": cond.status,
        "reason": cond.reason,
        "message": cond.message,
        "lastTransitionTime": since,
    }
    if generation is not None:
        entry["observedGeneration"] = generation
    return entry


def merge_conditions(
    previous: Iterable[Mapping[str, Any]] | None,
    current: Iterable[ConditionView],
    *,
    generation: int | None,
    now: str,
) -> list[RawCondition]:
    """The whole new condition list, in ``current``'s order, each stamped against ``previous``."""
    before = {cond.get("type"): cond for cond in previous or []}
    return [
        stamp_condition(before.get(cond.type), cond, now=now, generation=generation)
        for cond in current
    ]


def set_condition(
    conditions: Sequence[RawCondition],
    type: str,
    status: bool,
    *,
    reason: str,
    message: str,
    now: float,
) -> list[RawCondition]:
    """``conditions`` with ``type`` set in place (or appended), the others left as they were."""
    decided = ConditionView(type, "True" if status else "False", reason, message)
    stamped = format_time(now)
    updated = [
        stamp_condition(condition, decided, now=stamped)
        if condition.get("type") == type
        else RawCondition(**condition)
        for condition in conditions
    ]
    if not any(condition.get("type") == type for condition in conditions):
        updated.append(stamp_condition(None, decided, now=stamped))
    return updated
