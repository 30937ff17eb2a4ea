"""A real Kubernetes control plane on loopback, for running the suite against it.

``python -m tests.controlplane up --dir DIR`` builds (or reuses) kube-apiserver,
kube-controller-manager, kubectl and etcd with ``hack/controlplane/build.sh``, then starts:

- etcd on loopback, its data under ``DIR/etcd``;
- kube-apiserver with TLS from a CA of its own, ``--anonymous-auth=false``, static tokens,
  ``--authorization-mode=Node,RBAC``, service-account signing keys and a service range;
- kube-controller-manager with the controllers the project relies on (garbage collector,
  namespaces, service accounts and their tokens, the root CA publisher, Deployments and
  ReplicaSets for the chart's operator) and without node lifecycle, under its own identity;
- the project's local kubelet as node ``local``: a real Node with a Ready condition and a Lease
  kept current, pods run as processes, container logs served on its own TLS port.

It writes ``DIR/kubeconfig`` (context ``agentpool-real``, the admin token), then ``DIR/ready``, and
runs until SIGTERM or SIGINT, when it stops everything it started. ``.ci/run`` starts it, runs
``pytest --kubeconfig DIR/kubeconfig`` and stops it; a developer does the same by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from agentpool import certificates
from agentpool.local.kubeconfig import ApiAccess, write_kubeconfig
from agentpool.local.kubelet import Kubelet

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "hack" / "controlplane" / "build.sh"
CONTEXT = "agentpool-real"
SERVICE_RANGE = "10.0.0.0/24"
#: What kube-controller-manager runs here: enough for ownerReference garbage collection,
#: namespace deletion, the ``default`` service account a pod needs, and the chart's Deployment.
CONTROLLERS = (
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "deployment-controller",
    "replicaset-controller",
)
START_TIMEOUT = 120.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def build(binaries: Path | None) -> Path:
    """The folder of the four binaries: given, or built (once) into the cache."""
    if binaries is not None:
        return binaries
    result = subprocess.run(["bash", str(BUILD)], stdout=subprocess.PIPE, text=True, check=True)
    return Path(result.stdout.strip().splitlines()[-1])


def kube_version(binaries: Path) -> str:
    out = subprocess.run(
        [str(binaries / "kube-apiserver"), "--version"], capture_output=True, text=True, check=True
    )
    return out.stdout.split()[-1]


@dataclass(frozen=True)
class Pki:
    ca: Path
    serving_cert: Path
    serving_key: Path
    kubelet_client_cert: Path
    kubelet_client_key: Path
    sa_key: Path
    sa_pub: Path
    tokens: Path
    admin_token: str
    controller_token: str


def make_pki(directory: Path) -> tuple[Pki, certificates.KeyPair, certificates.KeyPair]:
    """The CA, the API server's and kubelet's certificates, signing keys and static tokens."""
    ca = certificates.make_ca("agentpool-real-ca")
    ca_cert, _ = ca.write(directory, "ca")
    hosts = (
        "127.0.0.1",
        "localhost",
        "10.0.0.1",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
    )
    serving_cert, serving_key = certificates.issue(ca, "kube-apiserver", hosts=hosts).write(
        directory, "apiserver"
    )
    client = certificates.issue(
        ca, "kube-apiserver-kubelet-client", organizations=("kubeadm:cluster-admins",), client=True
    )
    client_cert, client_key = client.write(directory, "kubelet-client")
    kubelet_serving = certificates.issue(ca, "local", hosts=("127.0.0.1", "local"))
    signing = certificates.make_signing_key()
    sa_key, sa_pub = directory / "sa.key", directory / "sa.pub"
    sa_key.write_bytes(signing)
    sa_key.chmod(0o600)
    sa_pub.write_bytes(certificates.public_pem(signing))
    admin, controller = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    tokens = directory / "tokens.csv"
    tokens.write_text(
        f'{admin},admin,admin-uid,"system:masters"\n'
        f"{controller},system:kube-controller-manager,kube-controller-manager-uid\n"
    )
    tokens.chmod(0o600)
    pki = Pki(
        ca=ca_cert,
        serving_cert=serving_cert,
        serving_key=serving_key,
        kubelet_client_cert=client_cert,
        kubelet_client_key=client_key,
        sa_key=sa_key,
        sa_pub=sa_pub,
        tokens=tokens,
        admin_token=admin,
        controller_token=controller,
    )
    return pki, ca, kubelet_serving


class Processes:
    """The control plane's processes, each logging to DIR/logs/NAME.log; stopped in reverse."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        self.logs.mkdir(parents=True, exist_ok=True)
        with (self.logs / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.started.append((name, process))
        return process

    def check(self) -> None:
        for name, process in self.started:
            if process.poll() is not None:
                tail = (self.logs / f"{name}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{name} exited with {process.returncode}:\n{tail}")

    def stop(self) -> None:
        for _, process in reversed(self.started):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(5)
        self.started.clear()


def wait_http(
    url: str,
    processes: Processes,
    *,
    context: ssl.SSLContext | None = None,
    token: str | None = None,
    what: str,
) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    last = ""
    while time.monotonic() < deadline:
        processes.check()
        try:
            request = urllib.request.Request(url, headers=headers)
            with urllib.request.urlopen(request, timeout=5, context=context) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError) as error:
            last = str(error)
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not become healthy in {START_TIMEOUT:g}s: {last}")


def kubectl(binaries: Path, kubeconfig: Path, *args: str) -> str:
    return subprocess.run(
        [str(binaries / "kubectl"), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        check=False,
    ).stdout


def wait_for_default_account(binaries: Path, kubeconfig: Path, processes: Processes) -> None:
    """Pods need the namespace's ``default`` service account, which the controller creates."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        processes.check()
        if kubectl(binaries, kubeconfig, "get", "serviceaccount", "default", "-o", "name"):
            return
        time.sleep(0.2)
    raise RuntimeError("kube-controller-manager made no default service account")


@dataclass(frozen=True)
class Started:
    admin: ApiAccess
    kubeconfig: Path
    ca: certificates.KeyPair
    kubelet_serving: certificates.KeyPair


def start_control_plane(directory: Path, binaries: Path, processes: Processes) -> Started:
    pki_dir = directory / "pki"
    pki, ca, kubelet_serving = make_pki(pki_dir)
    etcd_client, etcd_peer, secure = free_port(), free_port(), free_port()
    processes.start(
        "etcd",
        [
            str(binaries / "etcd"),
            "--name=local",
            f"--data-dir={directory / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{etcd_client}",
            f"--advertise-client-urls=http://127.0.0.1:{etcd_client}",
            f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
            f"--initial-cluster=local=http://127.0.0.1:{etcd_peer}",
            "--listen-metrics-urls=",
            # A test cluster: losing it to a power cut costs nothing, fsync costs every write.
            "--unsafe-no-fsync",
            "--log-level=warn",
        ],
    )
    wait_http(f"http://127.0.0.1:{etcd_client}/health", processes, what="etcd")
    processes.start(
        "kube-apiserver",
        [
            str(binaries / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{etcd_client}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={secure}",
            f"--cert-dir={pki_dir}",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.ca}",
            f"--token-auth-file={pki.tokens}",
            "--anonymous-auth=false",
            "--authorization-mode=Node,RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            f"--service-cluster-ip-range={SERVICE_RANGE}",
            # No Service of this cluster has endpoints to route to: nothing to reconcile.
            "--endpoint-reconciler-type=none",
            f"--kubelet-client-certificate={pki.kubelet_client_cert}",
            f"--kubelet-client-key={pki.kubelet_client_key}",
            "--kubelet-preferred-address-types=InternalIP",
            "--profiling=false",
            "--v=1",
        ],
    )
    server = f"https://127.0.0.1:{secure}"
    ca_pem = pki.ca.read_bytes()
    context = ssl.create_default_context(cadata=ca_pem.decode())
    wait_http(
        f"{server}/readyz", processes, context=context, token=pki.admin_token, what="kube-apiserver"
    )
    admin = ApiAccess(server, ca_pem, pki.admin_token)
    kubeconfig = write_kubeconfig(directory / "kubeconfig", admin, name=CONTEXT)
    controller_config = write_kubeconfig(
        pki_dir / "controller-manager.kubeconfig",
        ApiAccess(server, ca_pem, pki.controller_token),
        name=CONTEXT,
    )
    processes.start(
        "kube-controller-manager",
        [
            str(binaries / "kube-controller-manager"),
            f"--kubeconfig={controller_config}",
            f"--authentication-kubeconfig={controller_config}",
            f"--authorization-kubeconfig={controller_config}",
            f"--controllers={','.join(CONTROLLERS)}",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki.sa_key}",
            f"--root-ca-file={pki.ca}",
            f"--service-cluster-ip-range={SERVICE_RANGE}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            f"--cert-dir={pki_dir / 'controller-manager'}",
            "--v=1",
        ],
    )
    wait_for_default_account(binaries, kubeconfig, processes)
    return Started(admin=admin, kubeconfig=kubeconfig, ca=ca, kubelet_serving=kubelet_serving)


async def serve(directory: Path, binaries: Path) -> None:
    """Run the control plane and the kubelet until SIGTERM or SIGINT."""
    processes = Processes(directory / "logs")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    kubelet: Kubelet | None = None
    kubelet_task: asyncio.Task[None] | None = None
    try:
        started = await asyncio.to_thread(start_control_plane, directory, binaries, processes)
        kubelet = Kubelet(
            started.admin,
            work_dir=directory / "pods",
            cwd=REPO,
            register_node=True,
            serving=started.kubelet_serving,
            client_ca_pem=started.ca.cert_pem,
            version=kube_version(binaries),
        )
        kubelet_task = asyncio.create_task(kubelet.run())
        async with asyncio.timeout(30):
            await kubelet.wait_started()
        (directory / "ready").write_text(
            json.dumps({"kubeconfig": str(started.kubeconfig), "pid": os.getpid()}) + "\n"
        )
        print(f"control plane up: export KUBECONFIG={started.kubeconfig}", flush=True)
        waiter = asyncio.create_task(stop.wait())
        await asyncio.wait([waiter, kubelet_task], return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
    finally:
        if kubelet is not None:
            await kubelet.stop()
        if kubelet_task is not None:
            await asyncio.gather(kubelet_task, return_exceptions=True)
        processes.stop()
        with contextlib.suppress(FileNotFoundError):
            (directory / "ready").unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.controlplane")
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="run the control plane in the foreground")
    up.add_argument("--dir", type=Path, required=True, help="where its files and logs go")
    up.add_argument("--bin", type=Path, default=None, help="prebuilt binaries (default: build)")
    args = parser.parse_args(argv)
    directory = args.dir.resolve()
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    binaries = build(args.bin)
    asyncio.run(serve(directory, binaries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
