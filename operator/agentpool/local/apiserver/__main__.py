"""``python -m agentpool.local.apiserver``: serve the local API server alone, in the foreground.

For poking at it with kubectl or curl, and for the benchmark, which runs it in its own process so
that client and server do not share one interpreter. Prints the URL, serves until interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import signal

from agentpool.local.apiserver.server import ApiServer
from agentpool.local.apiserver.store import HistoryLimits


async def _serve(port: int, history: HistoryLimits) -> None:
    server = ApiServer(history=history)
    await server.start(port=port)
    print(server.url, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m agentpool.local.apiserver")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free one)")
    parser.add_argument(
        "--history", type=int, default=10_000, help="watch events kept per resource"
    )
    parser.add_argument(
        "--history-seconds",
        type=float,
        help="forget watch events older than this many seconds (0: never; default: 300)",
    )
    parser.add_argument(
        "--history-mib",
        type=float,
        help="MiB of watch events kept per resource (0: no bound; default: 32)",
    )
    args = parser.parse_args()
    limits = HistoryLimits.of(
        events=args.history, seconds=args.history_seconds, mib=args.history_mib
    )
    asyncio.run(_serve(args.port, limits))


if __name__ == "__main__":
    main()
