"""Which of a run's results are new since the last look, so each is streamed exactly once.

A PoolRun records small outputs and failures in ``status.items`` and ``status.failures`` and
moves the rest to ConfigMaps named in ``status.resultRefs``, read back by
:mod:`agentpool.wire.results`. :class:`ResultTracker` remembers the ids given out and how many
records of each ConfigMap it has read: from each status it takes the new records in status, and
says which ConfigMaps hold records not yet read (``status.resultRefs`` counts them, and the
operator writes a ConfigMap before the status that counts it). Pure: the caller reads the
ConfigMaps and hands their data back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentpool.api import ItemFailure
from agentpool.wire.results import iter_results, ref_name


@dataclass(frozen=True, slots=True)
class Result:
    """One item's outcome: its ``output``, or its ``failure`` (reason, message, attempts)."""

    id: str
    output: Any = None
    failure: ItemFailure | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None


def result_of(record: Mapping[str, Any]) -> Result:
    """A :class:`Result` from a JSON Lines record, ``{"id", "output"}`` or ``{"id", "failure"}``."""
    if "failure" in record:
        return Result(str(record["id"]), failure=ItemFailure.model_validate(record["failure"]))
    return Result(str(record["id"]), output=record.get("output"))


def _count(ref: Any) -> int:
    if not isinstance(ref, Mapping):
        return 0
    return int(ref.get("outputs") or 0) + int(ref.get("failures") or 0)


class ResultTracker:
    """The results of one run given out so far, by id, and the ConfigMap records read."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self._read: dict[str, int] = {}

    def _new(self, records: Any) -> list[Result]:
        fresh = []
        for record in records:
            key = str(record["id"])
            if key not in self.seen:
                self.seen.add(key)
                fresh.append(result_of(record))
        return fresh

    def from_status(self, status: Mapping[str, Any]) -> list[Result]:
        """The records in ``status`` itself not given out before."""
        inline = {"items": status.get("items") or {}, "failures": status.get("failures") or {}}
        return self._new(iter_results(inline, []))

    def unread(self, status: Mapping[str, Any]) -> list[str]:
        """The ConfigMaps of ``status.resultRefs`` that count more records than were read."""
        return [
            ref_name(ref)
            for ref in status.get("resultRefs") or []
            if _count(ref) > self._read.get(ref_name(ref), 0)
        ]

    def from_configmap(self, name: str, data: Mapping[str, str]) -> list[Result]:
        """The records of the ConfigMap ``name`` (its ``data``) not given out before."""
        records = list(iter_results({"resultRefs": [{"name": name}]}, [data]))
        self._read[name] = max(self._read.get(name, 0), len(records))
        return self._new(records)
