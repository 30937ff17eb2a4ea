"""`agentpool local up` as a user runs it: kubeconfig, busy checks, and a clean exit on signals."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agentpool.io.connection import Connection, make_api_client
from agentpool.local.up import serve
from cluster import wait_for
from pods import FAMILY, HEALTH_SERVER, pod, printed_pids


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def session_members(sid: int) -> list[int]:
    """Live processes whose session is sid (each pod's processes form one session)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def pod_log(core: client.CoreV1Api, name: str) -> str:
    """The pod's log, or "" while its container has not started (the API answers 400 then)."""
    try:
        return str(core.read_namespaced_pod_log(name, "default"))
    except ApiException as error:
        if error.status == 400:
            return ""
        raise


class Up:
    """One `agentpool local up` subprocess with its output in a file."""

    def __init__(self, directory: Path, *args: str) -> None:
        self.directory = directory
        self.output = directory.parent / f"{directory.name}.out"
        self.errors = directory.parent / f"{directory.name}.err"
        command = [sys.executable, "-m", "agentpool", "local", "up", "--dir", str(directory)]
        with self.output.open("w") as out, self.errors.open("w") as err:
            self.process = subprocess.Popen([*command, *args], stdout=out, stderr=err)

    def wait_up(self) -> str:
        wait_for(
            lambda: (
                "local cluster up" in self.output.read_text() or self.process.poll() is not None
            ),
            timeout=60,
            message="local up started",
        )
        assert self.process.poll() is None, self.errors.read_text()
        kubeconfig = yaml.safe_load((self.directory / "kubeconfig").read_text())
        assert kubeconfig["current-context"] == "agentpool-local"
        return str(kubeconfig["clusters"][0]["cluster"]["server"])

    def close(self) -> None:
        """Stop it the way a user would, so even a failed test leaves no pod process behind."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)


@pytest.fixture
def started(scratch: Path) -> Iterator[list[Up]]:
    ups: list[Up] = []
    yield ups
    for up in ups:
        up.close()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_leaves_no_process_behind(
    signum: signal.Signals, scratch: Path, started: list[Up]
) -> None:
    """SIGINT or SIGTERM stops `local up` with exit 0, ending every pod process and its children."""
    up = Up(scratch / "cluster", "--no-operator")
    started.append(up)
    up.wait_up()
    api_client = make_api_client(Connection(kubeconfig=str(scratch / "cluster" / "kubeconfig")))
    core = client.CoreV1Api(api_client)
    pids: list[int] = []
    try:
        for i in range(2):
            core.create_namespaced_pod("default", pod(f"family-{i}", FAMILY, grace=30))
        for i in range(2):
            pids += wait_for(
                lambda i=i: printed_pids(pod_log(core, f"family-{i}")),
                message="pod printed its pids",
            )
    finally:
        api_client.close()
    leaders = pids[::2]
    assert all(alive(pid) for pid in pids)
    up.process.send_signal(signum)
    assert up.process.wait(60) == 0, up.errors.read_text()
    try:
        assert [pid for pid in pids if alive(pid)] == []
        assert [sid for sid in leaders if session_members(sid)] == []
        assert "stopping the local cluster" in up.output.read_text()
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_killed_host_takes_its_pods_along(scratch: Path, started: list[Up]) -> None:
    """Even SIGKILL of `local up`, which runs no clean-up, ends the pods' main processes."""
    up = Up(scratch / "cluster", "--no-operator")
    started.append(up)
    up.wait_up()
    api_client = make_api_client(Connection(kubeconfig=str(scratch / "cluster" / "kubeconfig")))
    core = client.CoreV1Api(api_client)
    try:
        core.create_namespaced_pod("default", pod("server", HEALTH_SERVER))
        # Its whole line: the log may be read while the line is being written.
        line = wait_for(
            lambda: next(
                (x for x in pod_log(core, "server").split("\n")[:-1] if x.startswith("serving")),
                None,
            ),
            message="pod serving",
        )
        found = core.read_namespaced_pod("server", "default")
    finally:
        api_client.close()
    assert found.status.pod_ip in line
    leader = int(found.status.container_statuses[0].container_id.rsplit("/", 1)[1])
    assert alive(leader)
    up.process.kill()
    up.process.wait(30)
    wait_for(lambda: not alive(leader), timeout=30, message="pod process ended")


def test_busy_directory_and_port_are_refused(scratch: Path, started: list[Up]) -> None:
    """A second `up` on a directory or port in use exits 1 and says which one is busy."""
    first = Up(scratch / "one", "--no-operator")
    started.append(first)
    url = first.wait_up()
    port = url.rsplit(":", 1)[1]
    same_dir = Up(scratch / "one", "--no-operator")
    started.append(same_dir)
    assert same_dir.process.wait(60) == 1
    assert "is in use by another local cluster" in same_dir.errors.read_text()
    same_port = Up(scratch / "two", "--no-operator", "--port", port)
    started.append(same_port)
    assert same_port.process.wait(60) == 1
    assert f"port {port}" in same_port.errors.read_text()
    assert "already in use" in same_port.errors.read_text()
    lock = json.dumps((scratch / "one" / "local.lock").read_text())
    assert str(first.process.pid) in lock


async def test_an_operator_that_stops_on_its_own_stops_up_with_its_reason(
    scratch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`local up` whose operator stops unasked (it could not reach the API server, say) does not
    stay up serving pools nobody runs: it stops the cluster, says why and exits 1."""

    async def failing(kubeconfig: Path, stop: asyncio.Event) -> None:
        raise RuntimeError(f"cannot read {kubeconfig.name}")

    out = io.StringIO()
    async with asyncio.timeout(60):
        code = await serve(scratch / "cluster", port=0, operator=failing, out=out)

    assert code == 1
    assert "local cluster up" in out.getvalue()
    assert "stopping the local cluster" not in out.getvalue()
    errors = capsys.readouterr().err
    assert "the operator stopped (RuntimeError: cannot read kubeconfig;" in errors
    assert "stopping the local cluster" in errors
    assert not (scratch / "cluster" / "local.lock").read_text(), "the cluster is still up"


def test_up_with_the_operator_starts_and_stops_without_warnings(
    scratch: Path, started: list[Up]
) -> None:
    """`local up` with its operator, once the operator serves a pool, prints no warning from
    kopf about OS signals (up handles SIGINT itself and stops the operator by its flag), and
    SIGINT stops it with exit 0."""
    up = Up(scratch / "cluster")
    started.append(up)
    up.wait_up()
    api_client = make_api_client(Connection(kubeconfig=str(scratch / "cluster" / "kubeconfig")))
    pools = client.CustomObjectsApi(api_client)
    pool = {
        "apiVersion": "agentpool.dev/v1alpha1",
        "kind": "AgentPool",
        "metadata": {"name": "idle"},
        "spec": {"image": "agent", "minSize": 0},
    }
    try:
        pools.create_namespaced_custom_object(
            "agentpool.dev", "v1alpha1", "default", "agentpools", pool
        )
        wait_for(
            lambda: (
                pools.get_namespaced_custom_object(
                    "agentpool.dev", "v1alpha1", "default", "agentpools", "idle"
                )
                .get("status", {})
                .get("replicas")
                == 0
            ),
            60,
            message="the operator reported on the pool",
        )
    finally:
        api_client.close()
    up.process.send_signal(signal.SIGINT)
    assert up.process.wait(60) == 0, up.errors.read_text()
    errors = up.errors.read_text()
    assert "OS signals are ignored" not in errors, errors
    assert " WARNING " not in errors, errors
