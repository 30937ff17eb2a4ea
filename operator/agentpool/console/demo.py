"""``agentpool demo``: the whole product in one command, on a local cluster.

It starts the local cluster (API server, kubelet, operator) in a temporary directory, applies
``examples/quickstart/`` (a pool of slow-starting agents and a run of forty items, a few of which
fail under the Report policy), shows the run's progress, prints the final ``kubectl get
poolruns`` line and the failures, shuts everything down and exits 0 when the run drained.
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
from pathlib import Path
from typing import TextIO

import yaml

from agentpool import API_VERSION
from agentpool.api import RawRunStatus, raw_run_status
from agentpool.api.raw import RawBody
from agentpool.console.runs import collect_results, watch_run
from agentpool.console.tables import TABLE_ACCEPT, format_table
from agentpool.handlers.operator import embedded_operator
from agentpool.io.connection import Connection
from agentpool.io.kube import Kube
from agentpool.local.cluster import LocalCluster
from agentpool.local.kubeconfig import CONTEXT

NAMESPACE = "default"
RUN_TIMEOUT_SECONDS = 300.0


def quickstart_dir() -> Path:
    """The quickstart manifests: beside the package in a checkout, or in the image."""
    for base in (Path.cwd(), Path(__file__).resolve().parents[3], Path("/opt/agentpool")):
        candidate = base / "examples" / "quickstart"
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        "examples/quickstart/ not found; run `agentpool demo` from the repository's root"
    )


def load_manifests(directory: Path) -> list[RawBody]:
    manifests: list[RawBody] = []
    for path in sorted(directory.glob("*.yaml")):
        manifests += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    # Pools first, so the run finds its pool.
    manifests.sort(key=lambda doc: doc["kind"] != "AgentPool")
    return manifests


async def demo(out: TextIO = sys.stdout) -> int:
    directory = quickstart_dir()
    manifests = load_manifests(directory)
    run_name = next(doc["metadata"]["name"] for doc in manifests if doc["kind"] == "PoolRun")
    with tempfile.TemporaryDirectory(prefix="agentpool-demo-") as tmp:
        # The operator and the cluster log to a file, so the console shows the run, not them.
        log_path = Path(tmp) / "cluster.log"
        handler = logging.FileHandler(log_path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        try:
            out.write(f"starting a local cluster in {tmp}\n")
            # The quickstart's agents are commands relative to the repository's root.
            repo = directory.parents[1]
            operator = embedded_operator(Path(tmp) / "operator")
            async with LocalCluster(Path(tmp), operator=operator, kubelet={"cwd": repo}) as cluster:
                code, status = await show_quickstart(cluster.kubeconfig, manifests, run_name, out)
                out.write("shutting the local cluster down\n")
        finally:
            root.removeHandler(handler)
            handler.close()
        drained = status.get("result") == "Drained"
        if code != 0 or not drained:
            out.write("the run did not drain; the cluster's log ends with:\n")
            out.writelines(log_path.read_text(errors="replace").splitlines(keepends=True)[-30:])
            return 1
    return 0


async def show_quickstart(
    kubeconfig: Path, manifests: list[RawBody], run_name: str, out: TextIO
) -> tuple[int, RawRunStatus]:
    """Apply the quickstart, follow the run, print its row and failures; (exit code, status)."""
    kube = Kube.connect(Connection(kubeconfig=str(kubeconfig), context=CONTEXT))
    try:
        for manifest in manifests:
            await kube.create_manifest(manifest, NAMESPACE)
            kind, name = manifest["kind"].lower(), manifest["metadata"]["name"]
            out.write(f"{kind}.{API_VERSION.split('/')[0]}/{name} created\n")
        out.flush()
        code = await watch_run(kube, NAMESPACE, run_name, out=out, timeout=RUN_TIMEOUT_SECONDS)
        table = await kube.request(
            "GET", f"/apis/{API_VERSION}/namespaces/{NAMESPACE}/poolruns", accept=TABLE_ACCEPT
        )
        out.write("\n$ kubectl get poolruns\n" + format_table(table) + "\n")
        failures = [
            record
            for record in await collect_results(kube, NAMESPACE, run_name)
            if "failure" in record
        ]
        out.write(f"\n{len(failures)} failed items:\n")
        for record in failures:
            out.write(f"  {record['id']}: {json.dumps(record['failure'])}\n")
        run = await kube.get_custom("poolruns", NAMESPACE, run_name)
    finally:
        kube.close()
    return code, raw_run_status(run)
