"""``agentpool local up``: the local cluster in the foreground until SIGINT or SIGTERM.

Starts a :class:`~agentpool.local.cluster.LocalCluster` in DIR with the operator the CLI hands in
(none with ``--no-operator``), prints how to point kubectl at it, and on SIGINT or SIGTERM stops
the operator, the kubelet (ending every pod's process group) and the API server before exiting,
so no process it started outlives it. An operator that stops on its own stops the cluster too,
with exit code 1 and the reason. Called by :mod:`agentpool.cli`.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import TextIO

from agentpool.local.apiserver.storage.store import DEFAULT_HISTORY, HistoryLimits
from agentpool.local.cluster import ClusterBusy, LocalCluster, OperatorRunner
from agentpool.local.kubeconfig import CONTEXT


def usage(cluster: LocalCluster, *, operator: bool) -> str:
    parts = "API server, kubelet" + (", operator" if operator else "")
    kubeconfig = cluster.kubeconfig
    return (
        f"local cluster up at {cluster.url} ({parts}); context {CONTEXT}\n"
        f"  kubectl --kubeconfig {kubeconfig} get pods -o wide\n"
        f"or for this shell:\n"
        f"  export KUBECONFIG={kubeconfig}\n"
        f"  kubectl apply -f examples/quickstart/ && kubectl get agentpools,poolruns,pods\n"
        f"pod logs: kubectl logs POD (files under {cluster.dir / 'pods'})\n"
        + (
            "calls and casts over HTTPS: the gateway's URL and CA are in the ConfigMap "
            "agentpool-gateway of each namespace with a pool\n"
            if operator
            else ""
        )
        + "stop with Ctrl-C\n"
    )


async def serve(
    directory: Path,
    *,
    port: int,
    operator: OperatorRunner | None,
    out: TextIO,
    history: HistoryLimits = DEFAULT_HISTORY,
) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        async with LocalCluster(
            directory, port=port, operator=operator, history=history
        ) as cluster:
            out.write(usage(cluster, operator=cluster.operator_thread is not None))
            out.flush()
            await _either(stop, cluster.operator_ended)
            if not stop.is_set():
                # A cluster whose pools nobody serves would look up and do nothing.
                thread = cluster.operator_thread
                assert thread is not None, "only a cluster with an operator ends it"
                traceback = "; its traceback is above" if thread.error is not None else ""
                print(
                    f"agentpool local up: the operator stopped ({thread.reason}{traceback});"
                    " stopping the local cluster. Run `agentpool local up` again, or run it"
                    " with `--no-operator` and the operator apart with `agentpool run`",
                    file=sys.stderr,
                )
                return 1
            out.write("stopping the local cluster\n")
            out.flush()
    except ClusterBusy as error:
        print(f"agentpool local up: {error}", file=sys.stderr)
        return 1
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
    return 0


async def _either(*events: asyncio.Event) -> None:
    """Wait until one of the events is set."""
    waits = [asyncio.create_task(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


def run_up(
    directory: Path,
    *,
    port: int = 0,
    operator: OperatorRunner | None = None,
    history: HistoryLimits = DEFAULT_HISTORY,
) -> int:
    """Run the local cluster in DIR until interrupted; the exit code for the command line."""
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return asyncio.run(
        serve(directory, port=port, operator=operator, out=sys.stdout, history=history)
    )
