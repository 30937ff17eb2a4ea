"""The machine a benchmark ran on, for results.json and the manual: figures need their machine."""

from __future__ import annotations

import os
import platform
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def _proc(path: str, pattern: str) -> str | None:
    try:
        match = re.search(pattern, Path(path).read_text(), re.MULTILINE)
    except OSError:
        return None
    return match.group(1).strip() if match else None


def describe() -> dict[str, Any]:
    """CPU count and model, memory, system, Python, load average and the date, as a dict.

    The load average matters on a shared machine: other work on the same cores slows every
    process of the benchmark, the direct client's as much as the operator's.
    """
    memory_kib = _proc("/proc/meminfo", r"^MemTotal:\s+(\d+) kB")
    return {
        "cpus": os.cpu_count(),
        "cpu_model": _proc("/proc/cpuinfo", r"^model name\s*:\s*(.+)$") or platform.processor(),
        "memory_gib": round(int(memory_kib) / 1024**2, 1) if memory_kib else None,
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "load_average": _proc("/proc/loadavg", r"^(\S+ \S+ \S+)"),
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
