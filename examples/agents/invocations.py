"""An append-only record of every item an example agent is handed, for tests that count runs.

The example agents import it from beside themselves (``python -m agentpool.agent`` puts an agent
file's folder first on ``sys.path``, as Python does for a script). When ``INVOCATIONS_FILE`` is
set, each invocation appends one JSON line ``{"id", "attempt", "run", "pid"}`` to it; agents of a
pool share the file, and a single small append is atomic, so a test can prove that no recorded item
ran twice across agents and operator restarts.
"""

from __future__ import annotations

import json
import os

from agentpool.agent import Context


def record_invocation(context: Context) -> None:
    """Append this invocation to ``$INVOCATIONS_FILE``, if it is set."""
    path = os.environ.get("INVOCATIONS_FILE")
    if not path:
        return
    line = {"id": context.id, "attempt": context.attempt, "run": context.run, "pid": os.getpid()}
    with open(path, "a", encoding="utf-8") as file:
        file.write(json.dumps(line) + "\n")
