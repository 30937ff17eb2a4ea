"""The local kubelet runs a container from its image in podman's storage, when asked to.

A local cluster whose kubelet has ``images=True`` runs an example agent from the operator image
(``agentpool:0.1.0``): inside the image's root, as its user, with the pod's volumes mounted, Ready
through its readiness probe, logging to the pod's log, and gone with its mounts once deleted. A pod
whose image is not in local storage runs on the host as ever, and its Event says so. Needs root
and podman; the image is the one hack/image/build.sh builds (built here when absent).
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import subprocess
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from agentpool.io.connection import Connection, make_api_client
from agentpool.local.kubelet import processes
from agentpool.local.kubelet.images import IMAGE_ANNOTATION
from cluster import ClusterThread, wait_for

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
NAMESPACE = "default"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def image() -> str:
    """``localhost/agentpool:VERSION``: any build of it carries the examples these pods run, so
    one already in storage is used as it is; hack/image/build.sh builds it otherwise."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the kubelet mounts the image's filesystem and chroots into it")
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    reference = f"localhost/agentpool:{VERSION}"
    if subprocess.run(["podman", "image", "exists", reference], check=False).returncode != 0:
        built = subprocess.run(
            ["bash", str(ROOT / "hack" / "image" / "build.sh")],
            capture_output=True,
            text=True,
            timeout=1700,
            check=False,
        )
        if built.returncode == 3:
            pytest.skip(built.stderr.strip().splitlines()[-1])
        assert built.returncode == 0, built.stderr[-4000:]
    return reference


@contextlib.contextmanager
def _cluster_core(directory: Path, *, images: bool) -> Iterator[client.CoreV1Api]:
    """A local cluster whose kubelet runs pods from their images (or not), and a client of it."""
    thread = ClusterThread(directory, kubelet={"images": images})
    thread.start()
    try:
        api_client = make_api_client(Connection(kubeconfig=str(thread.cluster.kubeconfig)))
        try:
            yield client.CoreV1Api(api_client)
        finally:
            api_client.close()
    finally:
        thread.stop()


@pytest.fixture(scope="module")
def core(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[client.CoreV1Api]:
    """A cluster whose kubelet runs every pod from its image."""
    with _cluster_core(tmp_path_factory.mktemp("images"), images=True) as api:
        yield api


def _pod(name: str, image: str, command: list[str] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "agent",
        "image": image,
        "env": [{"name": "AGENTPOOL_TOKEN", "value": "t"}, {"name": "GREETING", "value": "hi"}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1},
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/agent"},
            {"name": "secret", "mountPath": "/var/run/secrets/agent"},
            {"name": "scratch", "mountPath": "/scratch"},
        ],
    }
    if command is not None:
        container["command"] = command
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [container],
            "terminationGracePeriodSeconds": 5,
            "volumes": [
                {"name": "config", "configMap": {"name": "agent-config"}},
                {"name": "secret", "secret": {"secretName": "agent-secret"}},
                {"name": "scratch", "emptyDir": {}},
            ],
        },
    }


@pytest.fixture(scope="module")
def sources(core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map(
        NAMESPACE, {"metadata": {"name": "agent-config"}, "data": {"mode": "image"}}
    )
    secret = base64.b64encode(b"s3cret").decode()
    core.create_namespaced_secret(
        NAMESPACE, {"metadata": {"name": "agent-secret"}, "data": {"key": secret}}
    )


def _status(core: client.CoreV1Api, name: str) -> Any:
    return core.read_namespaced_pod(name, NAMESPACE).status


def _ready(core: client.CoreV1Api, name: str) -> bool:
    conditions = _status(core, name).conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def _events(core: client.CoreV1Api, name: str) -> list[tuple[str, str]]:
    found = core.list_namespaced_event(NAMESPACE).items
    return [(e.reason, e.message) for e in found if e.involved_object.name == name]


def _leader(ip: str) -> int | None:
    """The container's process: the one of the pod's processes whose parent is not one."""
    pids = processes.pod_processes(ip)
    for pid in pids:
        parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        if parent not in pids:
            return pid
    return None


def _ids(pid: int) -> tuple[int, int]:
    lines = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(lines["Uid"].split()[0]), int(lines["Gid"].split()[0])


def test_a_pod_runs_inside_its_image_as_its_user_with_its_volumes(
    core: client.CoreV1Api, sources: None
) -> None:
    name = f"in-image-{uuid.uuid4().hex[:6]}"
    command = ["python", "-m", "agentpool.agent", "examples/agents/echo.py:agent"]
    core.create_namespaced_pod(NAMESPACE, _pod(name, "agentpool:0.1.0", command))
    wait_for(lambda: _ready(core, name), 90, message=f"pod {name} Ready")
    events = _events(core, name)
    assert any(
        reason == "Pulled" and "from image localhost/agentpool:0.1.0 (sha256:" in message
        for reason, message in events
    ), events
    ip = _status(core, name).pod_ip
    pid = wait_for(lambda: _leader(ip), 10, message="the container's process")
    assert _ids(pid) == (10001, 10001)
    root = Path(f"/proc/{pid}/root")
    assert os.readlink(root) != "/"
    assert (root / "opt/agentpool/examples/agents/echo.py").is_file()
    assert (
        os.readlink(f"/proc/{pid}/cwd").endswith("/opt/agentpool")
        or (Path(f"/proc/{pid}/cwd") / "examples").is_dir()
    )
    assert (root / "etc/agent/mode").read_text() == "image"
    # The image's /var/run is a link to /run, which a path through /proc/PID/root would follow
    # on the host: the mount is where the link leads inside the image.
    assert (root / "run/secrets/agent/key").read_text() == "s3cret"
    assert (root / "scratch").is_dir()
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert b"GREETING=hi" in environ
    assert b"PIP_DISABLE_PIP_VERSION_CHECK=1" in environ  # the image's ENV under the pod's
    mountinfo = Path(f"/proc/{pid}/mountinfo").read_text()
    assert "/etc/agent" in mountinfo
    assert "/etc/agent" not in Path("/proc/self/mountinfo").read_text()
    log = wait_for(lambda: core.read_namespaced_pod_log(name, NAMESPACE), 10, message="log")
    assert log.strip()
    core.delete_namespaced_pod(name, NAMESPACE)
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), 30, message="the process ends")
    wait_for(lambda: not processes.pod_processes(ip), 10, message="no process left")
    pods = {p.metadata.name for p in core.list_namespaced_pod(NAMESPACE).items}
    wait_for(
        lambda: name not in {p.metadata.name for p in core.list_namespaced_pod(NAMESPACE).items},
        30,
        message=f"pod {name} removed (of {pods})",
    )


def test_the_images_entrypoint_and_cmd_run_when_the_pod_names_no_command(
    core: client.CoreV1Api, sources: None
) -> None:
    """No command: the image's ``agentpool`` with args ``--version`` prints and exits 0."""
    name = f"entry-{uuid.uuid4().hex[:6]}"
    manifest = _pod(name, "agentpool:0.1.0")
    container = manifest["spec"]["containers"][0]
    container["args"] = ["--version"]
    del container["readinessProbe"]
    manifest["spec"]["restartPolicy"] = "Never"
    core.create_namespaced_pod(NAMESPACE, manifest)
    wait_for(lambda: _status(core, name).phase == "Succeeded", 60, message=f"{name} Succeeded")
    assert core.read_namespaced_pod_log(name, NAMESPACE).strip() == f"agentpool {VERSION}"
    core.delete_namespaced_pod(name, NAMESPACE)


def test_a_pod_whose_image_is_absent_runs_on_the_host_and_says_so(
    core: client.CoreV1Api, sources: None
) -> None:
    name = f"on-host-{uuid.uuid4().hex[:6]}"
    command = ["python", "-m", "agentpool.agent", "examples/agents/echo.py:agent"]
    manifest = _pod(name, "no-such-image:0.0.0", command)
    manifest["spec"]["containers"][0]["volumeMounts"] = []
    core.create_namespaced_pod(NAMESPACE, manifest)
    wait_for(lambda: _ready(core, name), 90, message=f"pod {name} Ready")
    events = _events(core, name)
    assert (
        "LocalProcess",
        "image no-such-image:0.0.0 is not in local image storage: running the container's "
        "command on the host",
    ) in events
    pid = wait_for(lambda: _leader(_status(core, name).pod_ip), 10, message="process")
    assert os.readlink(f"/proc/{pid}/root") == "/"
    assert _ids(pid) == (os.geteuid(), os.getegid())
    core.delete_namespaced_pod(name, NAMESPACE)
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), 30, message="the process ends")


@pytest.fixture(scope="module")
def plain_core(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[client.CoreV1Api]:
    """A cluster whose kubelet runs every pod on the host unless the pod asks for its image."""
    with _cluster_core(tmp_path_factory.mktemp("plain"), images=False) as api:
        yield api


def test_only_a_pod_annotated_so_runs_from_its_image_on_a_kubelet_that_runs_none(
    plain_core: client.CoreV1Api,
) -> None:
    """The annotation is how a test or CI runs chosen pods (the chart's operator, a pool's
    agents) from the image while the rest of the suite's pods stay on the host."""
    command = ["python", "-m", "agentpool.agent", "examples/agents/echo.py:agent"]
    asked, plain = (f"{what}-{uuid.uuid4().hex[:6]}" for what in ("asked", "plain"))
    for name in (asked, plain):
        manifest = _pod(name, "agentpool:0.1.0", command)
        spec = manifest["spec"]
        spec["containers"][0]["volumeMounts"], spec["volumes"] = [], []
        if name == asked:
            manifest["metadata"]["annotations"] = {IMAGE_ANNOTATION: "true"}
        plain_core.create_namespaced_pod(NAMESPACE, manifest)
    for name in (asked, plain):
        wait_for(lambda name=name: _ready(plain_core, name), 90, message=f"pod {name} Ready")
    roots = {}
    for name in (asked, plain):
        ip = _status(plain_core, name).pod_ip
        pid = wait_for(lambda ip=ip: _leader(ip), 10, message=f"{name}'s process")
        roots[name] = os.readlink(f"/proc/{pid}/root")
    assert roots[asked] != "/", roots
    assert roots[plain] == "/", roots
    events = _events(plain_core, asked)
    assert any(reason == "Pulled" for reason, _ in events), events
    # No word on images from a kubelet that runs none (probes failed while the agent started
    # are Unhealthy Events, as on any kubelet).
    assert [event for event in _events(plain_core, plain) if event[0] != "Unhealthy"] == []
    for name in (asked, plain):
        plain_core.delete_namespaced_pod(name, NAMESPACE)


def test_a_kubeconfig_the_pod_names_itself_is_neither_taken_over_nor_mounted(
    core: client.CoreV1Api, sources: None, tmp_path: Path
) -> None:
    """Only the kubeconfig the kubelet writes for the pod's token is handed to the container: a
    host file that the image's or the pod's own ``KUBECONFIG`` names keeps its owner and stays
    outside the container."""
    host_file = tmp_path / "host-kubeconfig"
    host_file.write_text("kept on the host\n")
    host_file.chmod(0o600)
    owner = host_file.stat().st_uid, host_file.stat().st_gid
    name = f"own-kubeconfig-{uuid.uuid4().hex[:6]}"
    command = ["python", "-m", "agentpool.agent", "examples/agents/echo.py:agent"]
    manifest = _pod(name, "agentpool:0.1.0", command)
    manifest["spec"]["automountServiceAccountToken"] = False
    manifest["spec"]["containers"][0]["env"].append({"name": "KUBECONFIG", "value": str(host_file)})
    core.create_namespaced_pod(NAMESPACE, manifest)
    wait_for(lambda: _ready(core, name), 90, message=f"pod {name} Ready")
    ip = _status(core, name).pod_ip
    pid = wait_for(lambda: _leader(ip), 10, message="the container's process")
    assert (host_file.stat().st_uid, host_file.stat().st_gid) == owner
    assert not (Path(f"/proc/{pid}/root") / str(tmp_path).lstrip("/")).exists()
    assert str(tmp_path) not in Path(f"/proc/{pid}/mountinfo").read_text()
    core.delete_namespaced_pod(name, NAMESPACE)
    wait_for(lambda: not processes.pod_processes(ip), 30, message="no process left")
