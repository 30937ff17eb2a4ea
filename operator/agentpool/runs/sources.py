"""Where a PoolRun's items come from: an inline list, a ConfigMap's text, or an HTTP source service.

The engine asks a source for items, telling it which ids are active and how many it may take in
this answer (its ``room``); a source answers with an item, a batch of up to that many, "nothing
ready yet" or "done". Inline and ConfigMap sources are replayable (the same items in the same
order every time), so a resumed run skips what it recorded; the HTTP source is not: a resumed run
goes on numbering after the items it counted, and runs an unfinished item again when the service
hands it out again. The daemon builds the source (it reads the ConfigMap) and hands it to the
engine; since the engine does no I/O of its own, the HTTP source is
:class:`agentpool.handlers.sources.HttpItemSource`, which reads the service's answers with
:func:`read_answer`.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol


class SourceError(Exception):
    """The source cannot give items; the message says which source and why."""


class Signal(enum.Enum):
    NOT_READY = "NotReady"
    DONE = "Done"


NOT_READY = Signal.NOT_READY
DONE = Signal.DONE


@dataclass(frozen=True)
class Pulled:
    """One item from a source."""

    value: Any


@dataclass(frozen=True)
class Batch:
    """Items from one answer of a source, in order; ``done``: they are its last."""

    values: tuple[Any, ...]
    done: bool = False


class ItemSource(Protocol):
    """What the engine pulls items from."""

    @property
    def name(self) -> str:
        """The source in a user's words, for messages: ``http source <url>``."""
        ...

    @property
    def replayable(self) -> bool:
        """The same items in the same order on every pull from the start."""
        ...

    @property
    def total(self) -> int | None:
        """How many items there are, when known up front."""
        ...

    async def next(self, active: Sequence[str], room: int = 1) -> Pulled | Batch | Signal:
        """The next item, a batch of up to ``room`` items, :data:`NOT_READY` or :data:`DONE`;
        raises :class:`SourceError`."""
        ...

    async def close(self) -> None: ...


class ListSource:
    """Items known up front: the run's inline ``items`` or a parsed ConfigMap."""

    replayable = True

    def __init__(
        self,
        items: Sequence[Any],
        *,
        error: SourceError | None = None,
        name: str = "the inline items",
    ) -> None:
        self.name = name
        self._items = list(items)
        self._next = 0
        self._error = error

    @property
    def total(self) -> int | None:
        return None if self._error else len(self._items)

    @property
    def items(self) -> Sequence[Any]:
        """Every item, known before the first pull."""
        return self._items

    async def next(self, active: Sequence[str], room: int = 1) -> Pulled | Signal:
        if self._error is not None:
            raise self._error
        if self._next >= len(self._items):
            return DONE
        self._next += 1
        return Pulled(self._items[self._next - 1])

    async def close(self) -> None:
        return None


def inline_source(items: Sequence[Any]) -> ListSource:
    return ListSource(items)


def parse_items_text(text: str, *, name: str, key: str) -> list[Any]:
    """The items in a ConfigMap value: a JSON array, or JSON Lines (one item a line)."""
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            parsed = json.loads(stripped)
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, list):
            return parsed
    items = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append(json.loads(line))
        except json.JSONDecodeError as error:
            raise SourceError(
                f"configmap {name} key {key} is not a JSON array or JSON Lines: "
                f"line {number}: {error.msg} (column {error.colno})"
            ) from None
    return items


def configmap_source(name: str, key: str, data: dict[str, str] | None) -> ListSource:
    """A source over ConfigMap ``name``'s ``key``; ``data`` is None when the ConfigMap is missing.

    A missing ConfigMap or key, or text that does not parse, gives a source that fails on its
    first pull, so the engine reports it the same way as any other source failure.
    """
    called = f"configmap {name} key {key}"
    if data is None:
        return ListSource([], error=SourceError(f"configmap {name} not found"), name=called)
    if key not in data:
        keys = ", ".join(sorted(data)) or "none"
        error = SourceError(f"configmap {name} has no key {key} (keys: {keys})")
        return ListSource([], error=error, name=called)
    try:
        return ListSource(parse_items_text(data[key], name=name, key=key), name=called)
    except SourceError as error:
        return ListSource([], error=error, name=called)


def source_digest(source: Any, text: str | None = None) -> str:
    """A digest of a run's ``spec.source`` and, for a ConfigMap source, the text it read.

    Recorded in status when the run starts, so a source that changed since (inline items
    replaced, a ConfigMap edited while the operator was away) is told apart and not mixed in.
    """
    canonical = json.dumps([source, text], sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def read_answer(url: str, text: str) -> Batch | Signal:
    """What a source service's answer says: items, nothing ready yet, or done.

    ``{"item": x}`` is one item, ``{"items": [...]}`` several (an empty list: nothing ready yet);
    ``"done": true`` beside either says they are the last, alone that there are no more.
    Anything else, ``item`` and ``items`` together, or ``items`` that is not a list, is a
    :class:`SourceError` naming the source. A batch of more items than the request allowed is
    read whole: the intake keeps the extra ones, and nothing a source gave is dropped.
    """
    try:
        answer = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as error:
        why = error.msg if isinstance(error, json.JSONDecodeError) else "nested too deep"
        raise SourceError(f"http source {url} answered with invalid JSON: {why}") from None
    if not isinstance(answer, dict):
        raise SourceError(f"http source {url} answered {type(answer).__name__}, not an object")
    done = answer.get("done") is True
    if "item" in answer and "items" in answer:
        raise SourceError(f'http source {url} answered both "item" and "items": {text[:200]}')
    if "items" in answer:
        items = answer["items"]
        if not isinstance(items, list):
            kind = type(items).__name__
            raise SourceError(f'http source {url} answered "items" that is {kind}, not a list')
        values = tuple(items)
    elif "item" in answer:
        values = () if answer["item"] is None else (answer["item"],)
    elif done:
        values = ()
    else:
        raise SourceError(f'http source {url} answered neither "item" nor "done": {text[:200]}')
    if not values:
        return DONE if done else NOT_READY
    return Batch(values, done=done)
