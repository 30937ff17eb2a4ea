"""Each run's journal of finished items: the module that keeps the operator's local state on disk.

A PoolRun writes its status about once a second. A finished item whose result is not written yet
would run again after an operator crash; the journal keeps it. The engine appends a line per
item as it starts and as it is recorded (``agentpool.runs.journaling`` encodes them), and hands
what it appended to the kernel (one write) before it starts any more items, so a killed operator
(SIGKILL, OOM, a crash) loses only results of items that were in flight a moment before, never
more than ``cap``: the restarted operator reads the journal back and runs again only those.
Lines are not synced to disk; what a lost node takes with it, the status written before it
still has.

A journal is a directory of segment files, one per status write: when the engine takes a
snapshot for a write it seals the current segment, and once the write succeeded it releases the
sealed ones, so the journal holds about one status interval of items. In a cluster the state
directory is an ``emptyDir`` volume, which outlives a restarted container but not the pod.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

SUFFIX = ".jsonl"
# Compact, as the engine encodes the entries it hands over already encoded.
_COMPACT = json.JSONEncoder(separators=(",", ":"))


class FileJournal:
    """The journal of one run, in its own directory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        numbers = self._segments()
        self._segment = (numbers[-1] + 1) if numbers else 1
        self._fd: int | None = None
        self._buffer: list[bytes] = []

    def _segments(self) -> list[int]:
        return sorted(int(p.stem) for p in self.path.glob(f"*{SUFFIX}") if p.stem.isdigit())

    def _file(self, number: int) -> Path:
        return self.path / f"{number:08d}{SUFFIX}"

    def load(self) -> list[Mapping[str, Any]]:
        """Every entry still held, oldest first; a line torn by a crash is skipped."""
        return list(self._entries())

    def _entries(self) -> Iterator[Mapping[str, Any]]:
        for number in self._segments():
            for line in self._file(number).read_bytes().splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                    yield entry

    def append(self, entry: Mapping[str, Any] | str) -> None:
        """Add one entry (or one already encoded as a JSON object); :meth:`flush` hands it to
        the kernel."""
        line = entry if isinstance(entry, str) else _COMPACT.encode(entry)
        self._buffer.append(line.encode() + b"\n")

    def flush(self) -> None:
        """Hand what was appended to the kernel: it survives the operator's process from here."""
        if not self._buffer:
            return
        data, self._buffer = b"".join(self._buffer), []
        if self._fd is None:
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
            try:
                self._fd = os.open(self._file(self._segment), flags, 0o600)
            except FileNotFoundError:
                # The run was deleted and its journal with it: nothing is left to keep.
                return
        os.write(self._fd, data)

    def seal(self) -> int:
        """Close the current segment before a status write; returns the mark to release."""
        self.flush()
        mark = self._segment
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._segment += 1
        return mark

    def release(self, mark: int) -> None:
        """A status write holds everything up to ``mark``: drop those segments."""
        for number in self._segments():
            if number <= mark:
                self._file(number).unlink(missing_ok=True)

    def discard(self) -> None:
        """The run is over: its status holds everything, the journal goes."""
        self._buffer = []
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)

    def close(self) -> None:
        self.flush()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class Journals:
    """The operator's state directory: a journal per run, named by the run's uid."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, uid: str) -> Path:
        if not uid or "/" in uid or uid in (".", ".."):
            raise ValueError(f"not a run's uid: {uid!r}")
        return self.root / "runs" / uid

    def open(self, uid: str) -> FileJournal | None:
        """The run's journal, or None (and a warning) when the directory cannot be used."""
        try:
            return FileJournal(self._path(uid))
        except OSError as error:
            logger.warning(
                "run %s keeps no journal, so a crash re-runs up to its cap of finished items: "
                "%s (give the operator a writable --state-dir)",
                uid,
                error,
            )
            return None

    def discard(self, uid: str) -> None:
        shutil.rmtree(self._path(uid), ignore_errors=True)
