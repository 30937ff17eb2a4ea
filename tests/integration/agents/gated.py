"""gated: an agent whose items wait for a file to appear, so a test can hold them in flight.

Each item names a gate file (``{"gate": PATH}``). The handler is synchronous, so an agent with
several slots runs each item on a thread of its own and holds that many at once until the test
creates the file. The output is the item.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from agentpool.agent import Agent, Context

#: A gate left closed for this long means the test has gone; give up rather than hang the agent.
GATE_TIMEOUT_SECONDS = 120.0


def wait_for_gate(item: Any, input: Any, context: Context) -> Any:
    """Return the item once its gate file exists."""
    deadline = time.monotonic() + GATE_TIMEOUT_SECONDS
    while not Path(item["gate"]).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gate {item['gate']} never opened")
        time.sleep(0.01)
    return item


agent = Agent(wait_for_gate, name="gated")
