"""slow_start: an agent whose start-up is expensive, like one that loads a model.

Parameters, from the environment (seconds, fractions allowed):

- ``SLOW_START_SECONDS`` (default 2.0): how long start-up takes; ``/healthz`` answers 503 until
  then, so the pool never hands it work early. ``inf`` means it never becomes ready.
- ``WORK_SECONDS`` (default 0.05): the work per item, overridden by ``workSeconds`` in the run's
  input or, above that, in the item.

The output is deterministic in the item: ``{"id", "digest", "length"}`` where ``digest`` is the
SHA-256 of the item's canonical JSON (sorted keys, no spaces) and ``length`` that JSON's length.
An item with ``"outputBytes": n`` also gets ``padding`` of n characters, for tests of large
outputs; an item with ``"fail": true`` fails with its ``message`` (a model rejecting its input).
With ``INVOCATIONS_FILE`` set it records every invocation (see ``invocations.py``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from typing import Any

from invocations import record_invocation

from agentpool.agent import Agent, Context


def _seconds(name: str, default: float) -> float:
    return max(0.0, float(os.environ.get(name, default)))


def load() -> dict[str, float]:
    """Take ``SLOW_START_SECONDS``, as loading a model would; the result is the agent's state."""
    seconds = _seconds("SLOW_START_SECONDS", 2.0)
    if math.isinf(seconds):
        while True:
            time.sleep(3600)
    time.sleep(seconds)
    return {"startSeconds": seconds, "workSeconds": _seconds("WORK_SECONDS", 0.05)}


def _work_seconds(item: Any, input: Any, default: float) -> float:
    for source in (item, input):
        if isinstance(source, dict) and "workSeconds" in source:
            return max(0.0, float(source["workSeconds"]))
    return default


def infer(item: Any, input: Any, context: Context) -> dict[str, Any]:
    """Work on one item for the configured time and answer with its digest."""
    record_invocation(context)
    time.sleep(_work_seconds(item, input, context.state["workSeconds"]))
    if isinstance(item, dict) and item.get("fail"):
        raise ValueError(str(item.get("message") or "the item asked to fail"))
    canonical = json.dumps(item, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    output: dict[str, Any] = {"id": context.id, "digest": digest, "length": len(canonical)}
    if isinstance(item, dict) and isinstance(item.get("outputBytes"), int):
        size = item["outputBytes"]
        output["padding"] = (digest * (size // len(digest) + 1))[:size]
    return output


agent = Agent(infer, startup=load, name="slow_start")

if __name__ == "__main__":
    raise SystemExit(agent.run())
