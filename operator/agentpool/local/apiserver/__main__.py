"""``python -m agentpool.local.apiserver``: serve the local API server alone, in the foreground.

For poking at it with kubectl or curl, and for the benchmark, which runs it in its own process so
that client and server do not share one interpreter. It serves HTTPS and takes a bearer token as
the local cluster's does, with the credentials under ``DIR/pki`` and a kubeconfig in
``DIR/kubeconfig``; prints the URL, serves until interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path

from agentpool.local import pki
from agentpool.local.apiserver.server import ApiServer
from agentpool.local.apiserver.storage.store import HistoryLimits
from agentpool.local.kubeconfig import ApiAccess, write_kubeconfig


async def _serve(directory: Path, port: int, history: HistoryLimits) -> None:
    credentials = pki.load_or_create(directory / "pki")
    server = ApiServer(
        history=history,
        tls=credentials.tls,
        token=credentials.token,
        signing_key=credentials.signing_key_pem,
    )
    await server.start(port=port)
    access = ApiAccess(server.url, credentials.ca_pem, credentials.token)
    write_kubeconfig(directory / "kubeconfig", access)
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
    parser.add_argument(
        "--dir", required=True, help="directory for the credentials and the kubeconfig"
    )
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
    asyncio.run(_serve(Path(args.dir), args.port, limits))


if __name__ == "__main__":
    main()
