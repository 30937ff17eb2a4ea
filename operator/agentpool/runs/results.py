"""Where a run's results live: in its status while they fit, else in ConfigMaps it owns.

Small outputs and failures sit in the run's ``status.items`` and ``status.failures`` while they
fit a byte budget; an output over 4 KiB, one holding a null, and everything past the budget,
goes into ConfigMaps
owned by the run (``<run>-results-<n>``, one ``results.jsonl`` key each, under 900 KiB), which
``status.resultRefs`` names in order. The engine places records with :func:`place_record` and
fills chunks with :class:`ResultChunks`; everyone reads them back, ``agentpool results RUN`` and
the Python client alike, with :func:`agentpool.wire.results.iter_results`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from agentpool.api import RawItemFailure, RawResultRef
from agentpool.wire.results import CHUNK_KEY, ResultRecord

SMALL_OUTPUT_BYTES = 4 * 1024
CHUNK_BYTES = 900 * 1024
STATUS_RESULTS_BUDGET = 128 * 1024
"""Bytes of ``items`` and ``failures`` kept in status, so the object stays far below 256 KiB."""


def chunk_name(run: str, number: int) -> str:
    return f"{run}-results-{number}"


_COMPACT = json.JSONEncoder(separators=(",", ":"))


def encode(value: Any) -> str:
    """The compact JSON every record is written in."""
    # One encoder for all: json.dumps builds a new one on every call that sets separators.
    return _COMPACT.encode(value)


def encoded_size(value: Any) -> int:
    return len(encode(value).encode())


def output_line(key: str, encoded_output: str) -> str:
    """:func:`record_line` of an output already encoded with :func:`encode`, without encoding
    it again."""
    return f'{{"id":{encode(key)},"output":{encoded_output}}}'


def record_line(key: str, *, output: Any = None, failure: RawItemFailure | None = None) -> str:
    """One JSON Lines record: ``{"id", "output"}`` or ``{"id", "failure"}``."""
    record: ResultRecord = {"id": key}
    if failure is not None:
        record["failure"] = failure
    else:
        record["output"] = output
    return encode(record)


def place_record(
    key: str,
    value: Any,
    *,
    is_output: bool,
    status_used: int,
    budget: int = STATUS_RESULTS_BUDGET,
    size: int | None = None,
) -> bool:
    """Whether a record may go into status (True) or must go to a ConfigMap (False).

    ``size`` is the value's :func:`encoded_size` when the caller has it already.
    """
    size = encoded_size(value) if size is None else size
    if is_output and (size > SMALL_OUTPUT_BYTES or holds_null(value)):
        return False
    return status_used + record_size(key, value, size=size) <= budget


def holds_null(value: Any) -> bool:
    """Whether JSON ``value`` is or holds a null anywhere.

    Status is written as a JSON merge patch (RFC 7386), where a null removes its key, so such
    an output would lose keys (or, null itself, vanish) on its way into ``status.items``; a
    result ConfigMap keeps it as the agent answered it.
    """
    if value is None:
        return True
    if isinstance(value, dict):
        return any(holds_null(item) for item in value.values())
    if isinstance(value, list):
        return any(holds_null(item) for item in value)
    return False


def record_size(key: str, value: Any, *, size: int | None = None) -> int:
    """Bytes a record adds to status: its key, its value and the punctuation between."""
    size = encoded_size(value) if size is None else size
    return encoded_size(key) + size + 2


class ResultChunks:
    """The run's result ConfigMaps: appends records, says which ConfigMaps changed."""

    def __init__(
        self,
        run: str,
        *,
        refs: Sequence[RawResultRef] = (),
        last_data: Mapping[str, str] | None = None,
        chunk_bytes: int = CHUNK_BYTES,
    ) -> None:
        self._run = run
        self._chunk_bytes = chunk_bytes
        self.refs: list[RawResultRef] = [
            {"name": ref["name"], "outputs": ref["outputs"], "failures": ref["failures"]}
            for ref in refs
        ]
        self._lines: list[str] = []
        self._bytes = 0
        self._dirty = False
        self._closed: list[tuple[str, dict[str, str]]] = []
        if self.refs:
            # Continue the last chunk rather than overwrite it.
            text = (last_data or {}).get(CHUNK_KEY, "")
            self._lines = [line for line in text.splitlines() if line.strip()]
            self._bytes = sum(len(line.encode()) + 1 for line in self._lines)

    def add(self, line: str, *, is_output: bool) -> None:
        size = len(line.encode()) + 1
        if not self.refs or (self._lines and self._bytes + size > self._chunk_bytes):
            if self._dirty:
                self._closed.append(self._current())
            self.refs.append(
                {"name": chunk_name(self._run, len(self.refs)), "outputs": 0, "failures": 0}
            )
            self._lines = []
            self._bytes = 0
        self._lines.append(line)
        self._bytes += size
        self.refs[-1]["outputs" if is_output else "failures"] += 1
        self._dirty = True

    def take_changed(self) -> list[tuple[str, dict[str, str]]]:
        """The ConfigMaps to write now: chunks filled since the last call, and the open one."""
        changed, self._closed = self._closed, []
        if self._dirty:
            changed.append(self._current())
            self._dirty = False
        return changed

    def _current(self) -> tuple[str, dict[str, str]]:
        return (self.refs[-1]["name"], {CHUNK_KEY: "\n".join(self._lines) + "\n"})
