"""flaky: an agent that fails the items that ask to fail, for tests of failures and retries.

What an item (a JSON object) may ask for:

- ``"fail": true``: fail every attempt, with ``message`` if given.
- ``"failTimes": n``: fail the first n attempts (by the envelope's ``attempt``), then succeed.
- ``"sleepSeconds": s``: take s seconds first, to outlast a call timeout.
- ``"waitFor": path``: wait until that file exists first (ten minutes at most), so a test holds
  the item in flight for as long as it looks, and lets it go by creating the file.
- ``"crash": true``: exit the whole process at once (code 3) mid-item, as a crashed agent would.
- ``"failOn": pod``: fail only in the pod of that name (its ``HOSTNAME``), so one agent of a
  pool looks broken while the others serve the same items.

Anything else succeeds with ``{"id", "attempt", "item"}``. With ``INVOCATIONS_FILE`` set it
records every invocation (see ``invocations.py``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from invocations import record_invocation

from agentpool.agent import Agent, Context

#: A file still missing after this long means the test that holds the item has gone: fail it
#: rather than keep the agent busy for good.
WAIT_FOR_SECONDS = 600.0


def wait_for_file(path: str) -> None:
    deadline = time.monotonic() + WAIT_FOR_SECONDS
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {WAIT_FOR_SECONDS:.0f}s")
        time.sleep(0.01)


def handle(item: Any, input: Any, context: Context) -> dict[str, Any]:
    """Fail, stall or crash when the item asks to; otherwise report what was received."""
    record_invocation(context)
    asks = item if isinstance(item, dict) else {}
    if asks.get("sleepSeconds"):
        time.sleep(float(asks["sleepSeconds"]))
    if asks.get("waitFor"):
        wait_for_file(str(asks["waitFor"]))
    if asks.get("crash"):
        os._exit(3)
    if asks.get("failOn") and asks["failOn"] == os.environ.get("HOSTNAME"):
        raise RuntimeError(f"item {context.id} fails on agent {asks['failOn']}")
    if asks.get("fail"):
        raise RuntimeError(str(asks.get("message") or f"item {context.id} asked to fail"))
    fail_times = int(asks.get("failTimes", 0))
    if context.attempt <= fail_times:
        raise RuntimeError(
            f"item {context.id} fails attempt {context.attempt} of the first {fail_times}"
        )
    return {"id": context.id, "attempt": context.attempt, "item": item}


agent = Agent(handle, name="flaky")

if __name__ == "__main__":
    raise SystemExit(agent.run())
