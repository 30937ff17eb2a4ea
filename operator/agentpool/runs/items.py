"""Naming and routing items: which id an item is recorded under, and which pool it goes to.

Pure functions the engine calls on each item as it comes from the source. An item that cannot be
named or routed is rejected on its own, with a reason and a message; the rest of the run goes on.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentpool.api.reasons import Reason
from agentpool.runs.config import RunConfig


@dataclass(frozen=True)
class Rejection:
    """Why an item fails before any agent sees it."""

    reason: str
    message: str


MADE_UP = frozenset({Reason.MISSING_ID, Reason.DUPLICATE_ID})
"""Reasons of the items recorded under a made-up key rather than their own id."""


@dataclass(frozen=True)
class Named:
    """An item with the key its result is recorded under; ``rejection`` set if it cannot run.

    ``displaced``: a made-up key that this item's real id takes over; the record filed under it
    moves to ``moved_to``, so neither is lost.
    """

    key: str
    index: int
    value: Any
    rejection: Rejection | None = None
    displaced: str | None = None
    moved_to: str | None = None


def real_id(value: Any, id_field: str) -> str | None:
    """The id an item names itself by, or None when it has no usable one."""
    raw = value.get(id_field) if isinstance(value, dict) else None
    if isinstance(raw, bool) or not isinstance(raw, str | int) or raw == "":
        return None
    return str(raw)


@dataclass
class ItemKeys:
    """The keys of one run's items: real ids, and keys made up for items that lack one.

    A made-up key (``[<index>]`` for an item without a usable id, ``<id>[<index>]`` for a
    duplicate) is never one a real id has or will have: it avoids every id of a source known up
    front (``reserved``), and when a real id comes later (an HTTP source) and equals a made-up
    key, the real item takes its id and the made-up record moves to a fresh key.
    """

    reserved: set[str] = field(default_factory=set)
    real: set[str] = field(default_factory=set)
    made_up: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, values: Sequence[Any] | None, *, id_field: str | None) -> ItemKeys:
        """The keys of a run whose items are ``values`` when known up front, else None."""
        if values is None or id_field is None:
            return cls()
        ids = (real_id(value, id_field) for value in values)
        return cls(reserved={key for key in ids if key is not None})

    def resume(self, *, recorded: Iterable[str], made_up: Collection[str]) -> None:
        """Carry on after an operator restart, for a source that does not give its items
        again: the keys recorded before stay taken, the real ids among them stay seen."""
        self.made_up.update(made_up)
        self.real.update(set(recorded) - set(made_up))

    def _taken(self, key: str) -> bool:
        return key in self.reserved or key in self.real or key in self.made_up

    def _fresh(self, base: str) -> str:
        key, number = base, 1
        while self._taken(key):
            number += 1
            key = f"{base}[{number}]"
        self.made_up.add(key)
        return key

    def name(self, value: Any, index: int, *, id_field: str | None) -> Named:
        """Name the item at ``index``: by its ``id_field`` when one is given, else by its index.

        A duplicate id is recorded under ``"<id>[<index>]"`` so that it never overwrites the
        result of the first item with that id; an item without a usable id under ``"[<index>]"``;
        either gets a further ``[<n>]`` when a real id already is that key.
        """
        if id_field is None:
            return Named(key=str(index), index=index, value=value)
        key = real_id(value, id_field)
        if key is None:
            base = f"[{index}]"
            rejection = Rejection(
                Reason.MISSING_ID,
                f"item at index {index} has no string or integer field {id_field!r} to name it",
            )
        elif key in self.real:
            base = f"{key}[{index}]"
            rejection = Rejection(
                Reason.DUPLICATE_ID,
                f"item at index {index} has id {key!r}, which an earlier item already has; "
                "ids must be unique",
            )
        else:
            self.real.add(key)
            if key in self.made_up:
                self.made_up.discard(key)
                return Named(
                    key=key, index=index, value=value, displaced=key, moved_to=self._fresh(key)
                )
            return Named(key=key, index=index, value=value)
        return Named(key=self._fresh(base), index=index, value=value, rejection=rejection)


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
