"""Running an agent as a process: settings from the environment, then its server until SIGTERM.

``python -m agentpool.agent`` and ``Agent.run`` call ``run_agent``; ``serve`` does the same in an
event loop that already runs. SIGTERM (a kubelet deleting the pod) or SIGINT (Ctrl-C) stops the
server, which then drains: no new work, the current item finishes, and the process exits.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from agentpool.agent.server import AgentServer, Served
from agentpool.agent.settings import ConfigError, Settings, configure_logging


async def serve(agent: Served, *, host: str | None = None, port: int | None = None) -> int:
    """Serve ``agent`` in the running loop with settings from the environment; the exit status."""
    settings = Settings.from_env(os.environ, host=host, port=port)
    return await _until_signalled(AgentServer(agent, settings))


def run_agent(agent: Served, *, host: str | None = None, port: int | None = None) -> int:
    """Configure logging and serve ``agent`` until SIGTERM; the process's exit status."""
    configure_logging()
    try:
        settings = Settings.from_env(os.environ, host=host, port=port)
    except ConfigError as exc:
        print(f"agentpool.agent: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(_until_signalled(AgentServer(agent, settings)))


async def _until_signalled(server: AgentServer) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = (signal.SIGTERM, signal.SIGINT)
    for signum in signals:
        loop.add_signal_handler(signum, stop.set)
    try:
        return await server.serve_until(stop)
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)
