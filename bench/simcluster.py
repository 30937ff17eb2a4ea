"""``python -m bench.simcluster --dir DIR``: a local cluster whose kubelet simulates every pod.

The simulated scenario's cluster: the local API server and a kubelet in simulated mode
(:mod:`agentpool.local.kubelet.simulator`), so pods turn Ready without a process and one
in-process agent answers on every pod's address, echoing after ``--delay`` seconds. It prints
``local cluster up at URL`` as ``agentpool local up`` does, runs until SIGTERM or SIGINT, and
raises its open-files limit to the hard limit first, since every simulated pod holds a listening
socket. The operator runs elsewhere, as :class:`bench.harness.OperatorProcess`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import resource
import signal
from pathlib import Path

from agentpool.local.cluster import LocalCluster


async def serve(directory: Path, delay: float) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with LocalCluster(directory, kubelet={"simulated_delay": delay}) as cluster:
        print(f"local cluster up at {cluster.url} (simulated kubelet)", flush=True)
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.simcluster")
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--delay", type=float, default=0.01, help="seconds each echo takes")
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    asyncio.run(serve(args.dir, args.delay))


if __name__ == "__main__":
    main()
