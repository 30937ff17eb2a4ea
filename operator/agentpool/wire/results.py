"""A run's results as they are read back: the records in its status and in its result ConfigMaps.

The run engine writes each item's output or failure into the PoolRun's ``status.items`` and
``status.failures`` while they fit, and the rest as JSON Lines into ConfigMaps that
``status.resultRefs`` names in order (``agentpool.runs.results`` decides where each goes and
fills the ConfigMaps). Reading them back is shared by both sides of that layout, so it lives
here, below them: the operator's ``agentpool results`` (``agentpool.console.runs``), the engine
resuming a run (``agentpool.runs.status``), and the Python client that streams a run's results
(``agentpool.client.records``). Records are read as JSON, unvalidated: a failure is the mapping
the operator wrote, which a reader validates into its model if it needs one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypedDict, cast

#: The one key of a result ConfigMap's ``data``: its JSON Lines.
CHUNK_KEY = "results.jsonl"


class ResultRecord(TypedDict, total=False):
    """One record of a run's results: ``{"id", "output"}`` or ``{"id", "failure"}``, as status
    holds it and as each line of a result ConfigMap and of ``agentpool results`` is written."""

    id: str
    output: Any
    failure: Mapping[str, Any]
    """``{"reason", "message", "attempts", "agent"}``, an ``ItemFailure`` on the wire."""


def ref_name(ref: Any) -> str:
    """The ConfigMap name of a ``status.resultRefs`` entry (``{"name", "outputs", "failures"}``)."""
    return str(ref["name"]) if isinstance(ref, Mapping) else str(ref)


def _chunk_records(data: Mapping[str, str]) -> Iterator[ResultRecord]:
    for line in data.get(CHUNK_KEY, "").splitlines():
        if line.strip():
            record = json.loads(line)
            if isinstance(record, dict) and "id" in record:
                # Read as the engine wrote it: the JSON object is a record.
                yield cast(ResultRecord, record)


def iter_results(
    status: Mapping[str, Any], configmaps: Sequence[Mapping[str, str]]
) -> Iterator[ResultRecord]:
    """Every output and failure of a run, once each: from status, then from its ConfigMaps.

    ``configmaps`` holds the ``data`` of each ConfigMap in ``status.resultRefs``, in that order.
    Records are ``{"id", "output"}`` or ``{"id", "failure": {"reason", "message", ...}}``.
    """
    refs = status.get("resultRefs") or []
    if len(configmaps) != len(refs):
        names = ", ".join(ref_name(ref) for ref in refs)
        raise ValueError(f"{len(refs)} result configmaps ({names}) but {len(configmaps)} given")
    seen: set[str] = set()
    for key, output in (status.get("items") or {}).items():
        seen.add(key)
        yield {"id": key, "output": output}
    for key, failure in (status.get("failures") or {}).items():
        if key not in seen:
            seen.add(key)
            yield {"id": key, "failure": failure}
    for data in configmaps:
        for record in _chunk_records(data):
            if record["id"] not in seen:
                seen.add(record["id"])
                yield record
