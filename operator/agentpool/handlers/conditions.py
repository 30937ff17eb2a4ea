"""Stamping conditions as Kubernetes expects: a transition time that moves only on a change.

The pure cores decide a condition's type, status, reason and message; the handlers call
:func:`merge_conditions` to carry over ``lastTransitionTime`` from the previous status when the
condition's status did not change, and to record the generation it was computed from.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Protocol


class ConditionLike(Protocol):
    @property
    def type(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def message(self) -> str: ...


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_conditions(
    previous: Iterable[dict[str, Any]] | None,
    current: Iterable[ConditionLike],
    *,
    generation: int | None,
    now: str,
) -> list[dict[str, Any]]:
    """The new condition list in wire form, keeping transition times where status held."""
    before = {cond.get("type"): cond for cond in previous or []}
    merged = []
    for cond in current:
        old = before.get(cond.type)
        since = now
        if old is not None and old.get("status") == cond.status and old.get("lastTransitionTime"):
            since = old["lastTransitionTime"]
        entry: dict[str, Any] = {
            "type": cond.type,
            "status": cond.status,
            "reason": cond.reason,
            "message": cond.message,
            "lastTransitionTime": since,
        }
        if generation is not None:
            entry["observedGeneration"] = generation
        merged.append(entry)
    return merged
