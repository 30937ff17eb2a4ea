"""``python -m agentpool.agent MODULE:OBJECT``: run one agent in the foreground.

This is the command of every agent pod (and of the local kubelet's agent processes). It loads the
agent, then serves it on ``AGENT_HOST``/``AGENT_PORT`` with the token in ``AGENTPOOL_TOKEN``, which
must be set: without it the agent refuses to start rather than serve anyone who asks.
"""

from __future__ import annotations

import argparse
import sys

from agentpool.agent.loader import LoadError, load_agent
from agentpool.agent.running import run_agent
from agentpool.agent.settings import configure_logging


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, load the agent and serve it; the process's exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m agentpool.agent",
        description="Serve an agentpool agent over the agent protocol until SIGTERM.",
    )
    parser.add_argument(
        "target",
        help="MODULE:OBJECT or path/to/file.py:OBJECT naming an agentpool.agent.Agent"
        " (OBJECT defaults to 'agent')",
    )
    parser.add_argument("--host", help="address to listen on (default: $AGENT_HOST or 0.0.0.0)")
    parser.add_argument("--port", type=int, help="port to listen on (default: $AGENT_PORT or 8080)")
    args = parser.parse_args(argv)
    configure_logging()
    try:
        agent = load_agent(args.target)
    except LoadError as exc:
        print(f"agentpool.agent: {exc}", file=sys.stderr)
        return 2
    return run_agent(agent, host=args.host, port=args.port)


if __name__ == "__main__":
    sys.exit(main())
