"""Naming and routing items: which id an item is recorded under, and which pool it goes to.

Pure functions the engine calls on each item as it comes from the source. An item that cannot be
named or routed is rejected on its own, with a reason and a message; the rest of the run goes on.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass
from typing import Any

from agentpool.api.reasons import Reason
from agentpool.runs.config import RunConfig


@dataclass(frozen=True)
class Rejection:
    """Why an item fails before any agent sees it."""

    reason: str
    message: str


@dataclass(frozen=True)
class Named:
    """An item with the key its result is recorded under; ``rejection`` set if it cannot run."""

    key: str
    index: int
    value: Any
    rejection: Rejection | None = None


def name_item(value: Any, index: int, *, id_field: str | None, seen: Set[str]) -> Named:
    """Name the item at ``index``: by its ``id_field`` when one is given, else by its index.

    A duplicate id is recorded under ``"<id>[<index>]"`` so that it never overwrites the result of
    the first item with that id; an item without a usable id under ``"[<index>]"``.
    """
    if id_field is None:
        key = str(index)
    else:
        raw = value.get(id_field) if isinstance(value, dict) else None
        if isinstance(raw, bool) or not isinstance(raw, str | int) or raw == "":
            return Named(
                key=f"[{index}]",
                index=index,
                value=value,
                rejection=Rejection(
                    Reason.MISSING_ID,
                    f"item at index {index} has no string or integer field {id_field!r} to name it",
                ),
            )
        key = str(raw)
    if key in seen:
        return Named(
            key=f"{key}[{index}]",
            index=index,
            value=value,
            rejection=Rejection(
                Reason.DUPLICATE_ID,
                f"item at index {index} has id {key!r}, which an earlier item already has; "
                "ids must be unique",
            ),
        )
    return Named(key=key, index=index, value=value)


def route_item(value: Any, config: RunConfig) -> str | Rejection:
    """The pool an item goes to: the run's pool, or the one its routing field names."""
    if config.routes is None:
        assert config.pool is not None
        return config.pool
    routes = config.routes
    raw = value.get(routes.field) if isinstance(value, dict) else None
    if raw is not None and not isinstance(raw, dict | list):
        pool = routes.pools.get(str(raw))
        if pool is not None:
            return pool
    known = ", ".join(sorted(routes.pools)) or "none"
    return Rejection(
        Reason.NO_ROUTE,
        f"item field {routes.field!r} is {raw!r}, which no route names (routes: {known})",
    )
