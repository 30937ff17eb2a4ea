"""The local kubelet: pods run, probe, crash, log and die properly, under the local API server or
as the node of a real control plane."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cluster import ClusterHandle, Kubectl, wait_for
from pods import FAMILY, HEALTH_SERVER, http_readiness, pod, printed_pids

NAMESPACE = "default"


@pytest.fixture(scope="module")
def core(local_cluster: ClusterHandle) -> Iterator[client.CoreV1Api]:
    if not local_cluster.runs_local_processes():
        pytest.skip(
            "needs the local kubelet as the cluster's node: the local cluster, or a real "
            "control plane from tests/controlplane.py"
        )
    api_client = local_cluster.api_client()
    try:
        yield client.CoreV1Api(api_client)
    finally:
        api_client.close()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def read(core: client.CoreV1Api, name: str) -> dict[str, Any] | None:
    try:
        response = core.read_namespaced_pod(name, NAMESPACE, _preload_content=False)
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    result: dict[str, Any] = json.loads(response.data)
    return result


def condition(found: dict[str, Any] | None, kind: str) -> str | None:
    for entry in ((found or {}).get("status") or {}).get("conditions") or []:
        if entry["type"] == kind:
            return str(entry["status"])
    return None


def container_status(found: dict[str, Any] | None) -> dict[str, Any]:
    statuses = ((found or {}).get("status") or {}).get("containerStatuses") or [{}]
    return dict(statuses[0])


def logs(core: client.CoreV1Api, name: str) -> str:
    """The pod's log, or "" while its container has not started (the API answers 400 then)."""
    try:
        return str(core.read_namespaced_pod_log(name, NAMESPACE))
    except ApiException as error:
        if error.status == 400:
            return ""
        raise


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def create(core: client.CoreV1Api, manifest: dict[str, Any]) -> str:
    core.create_namespaced_pod(NAMESPACE, manifest)
    return str(manifest["metadata"]["name"])


def test_ready_only_after_readiness_probe_passes(core: client.CoreV1Api, scratch: Path) -> None:
    """A pod answering 503 stays unready over several probes and turns Ready once it answers 200."""
    gate = scratch / "ready"
    name = create(
        core,
        pod(
            unique("ready"),
            HEALTH_SERVER,
            env={"READY_FILE": str(gate)},
            readiness=http_readiness(),
        ),
    )
    running = wait_for(
        lambda: (p := read(core, name)) and p["status"].get("phase") == "Running" and p,
        message="pod running",
    )
    assert running["spec"]["nodeName"] == "local"
    wait_for(lambda: logs(core, name).count("probe 503") >= 2, message="two failed probes")
    assert condition(read(core, name), "Ready") == "False"
    assert container_status(read(core, name))["ready"] is False
    gate.touch()
    wait_for(lambda: condition(read(core, name), "Ready") == "True", message="pod Ready")
    assert "probe 200" in logs(core, name)
    core.delete_namespaced_pod(name, NAMESPACE)


def test_failing_probe_turns_ready_false(core: client.CoreV1Api, scratch: Path) -> None:
    """A Ready pod whose probe starts failing is reported Ready False, without a restart."""
    gate = scratch / "ready"
    gate.touch()
    name = create(
        core,
        pod(
            unique("unready"),
            HEALTH_SERVER,
            env={"READY_FILE": str(gate)},
            readiness=http_readiness(),
        ),
    )
    wait_for(lambda: condition(read(core, name), "Ready") == "True", message="pod Ready")
    gate.unlink()
    wait_for(lambda: condition(read(core, name), "Ready") == "False", message="pod unready")
    found = read(core, name)
    assert condition(found, "ContainersReady") == "False"
    assert container_status(found)["restartCount"] == 0
    assert "running" in container_status(found)["state"]
    core.delete_namespaced_pod(name, NAMESPACE)


def unhealthy_events(core: client.CoreV1Api, name: str) -> list[Any]:
    """The Unhealthy Events about pod ``name``, as ``kubectl describe pod`` lists them."""
    found = core.list_namespaced_event(
        NAMESPACE, field_selector=f"involvedObject.name={name},reason=Unhealthy"
    )
    return list(found.items)


def test_a_failing_readiness_probe_is_one_unhealthy_event_whose_count_rises(
    core: client.CoreV1Api, scratch: Path
) -> None:
    """Every failed probe attempt is a Warning Event Unhealthy with the probe's own words, as a
    real kubelet posts them, from the container's start on; repeats raise the count of one Event
    rather than adding an Event each."""
    name = create(
        core,
        pod(
            unique("unhealthy"),
            HEALTH_SERVER,
            env={"READY_FILE": str(scratch / "never")},
            readiness=http_readiness(),
        ),
    )
    said = "Readiness probe failed: HTTP probe failed with statuscode: 503"

    def answered_503(count: int) -> Any:
        # Before the server listens, probes are refused: an Event of its own.
        return next(
            (e for e in unhealthy_events(core, name) if e.message == said and e.count >= count),
            None,
        )

    first = wait_for(lambda: answered_503(1), message="an Unhealthy Event of the 503")
    assert first.type == "Warning"
    assert first.source.component == "kubelet"
    assert first.involved_object.kind == "Pod"
    assert first.involved_object.uid == read(core, name)["metadata"]["uid"]  # type: ignore[index]
    risen = wait_for(lambda: answered_503(3), message="the Unhealthy Event's count rising to 3")
    assert risen.metadata.name == first.metadata.name
    assert risen.last_timestamp > risen.first_timestamp
    assert [e.message for e in unhealthy_events(core, name)].count(said) == 1
    assert condition(read(core, name), "Ready") == "False"
    core.delete_namespaced_pod(name, NAMESPACE)


def test_a_probe_of_a_port_nothing_listens_on_says_connection_refused(
    core: client.CoreV1Api,
) -> None:
    """An agent listening elsewhere than its probe asks: the Event says so in a kubelet's
    words, naming the address it dialled."""
    probe = http_readiness()
    probe["httpGet"]["port"] = 8081
    name = create(core, pod(unique("wrong-port"), HEALTH_SERVER, readiness=probe))
    found = wait_for(lambda: unhealthy_events(core, name), message="an Unhealthy Event")
    ip = read(core, name)["status"]["podIP"]  # type: ignore[index]
    assert found[0].message == (
        f'Readiness probe failed: Get "http://{ip}:8081/healthz": '
        f"dial tcp {ip}:8081: connect: connection refused"
    )
    core.delete_namespaced_pod(name, NAMESPACE)


def test_crashing_command_backs_off(core: client.CoreV1Api) -> None:
    """A command that keeps failing shows CrashLoopBackOff, a growing restartCount and its exit."""
    name = create(core, pod(unique("crash"), "print('boom', flush=True); raise SystemExit(3)"))
    first = wait_for(
        lambda: (
            container_status(read(core, name)).get("restartCount", 0) >= 1
            and container_status(read(core, name))
        ),
        message="first restart",
    )
    later = wait_for(
        lambda: (
            (s := container_status(read(core, name))).get("restartCount", 0) > first["restartCount"]
            and s.get("state", {}).get("waiting", {}).get("reason") == "CrashLoopBackOff"
            and s
        ),
        message="a later restart in back-off",
    )
    assert later["lastState"]["terminated"]["exitCode"] == 3
    assert later["lastState"]["terminated"]["reason"] == "Error"
    assert "back-off" in later["state"]["waiting"]["message"]
    found = read(core, name)
    assert found is not None
    assert found["status"]["phase"] == "Running"
    assert condition(found, "Ready") == "False"
    assert "boom" in logs(core, name)
    core.delete_namespaced_pod(name, NAMESPACE)


CRASH_AT_START_UP = (
    "for n in range(100): print('loading', n)\nraise SystemExit('no model at /models/agent.bin')"
)


def test_a_crash_reports_the_end_of_its_output_as_termination_message(
    core: client.CoreV1Api,
) -> None:
    """terminationMessagePolicy FallbackToLogsOnError: a container that exits with an error,
    writing no termination message file, has the last 80 lines of its output as the message
    of its terminated state, as a real kubelet reports it."""
    manifest = pod(unique("crashmsg"), CRASH_AT_START_UP, restart_policy="Never")
    manifest["spec"]["containers"][0]["terminationMessagePolicy"] = "FallbackToLogsOnError"
    name = create(core, manifest)
    terminated = wait_for(
        lambda: container_status(read(core, name)).get("state", {}).get("terminated"),
        message="state.terminated",
    )
    expected = "".join(f"loading {n}\n" for n in range(21, 100))
    assert terminated["exitCode"] == 1
    assert terminated["message"] == expected + "no model at /models/agent.bin\n"
    core.delete_namespaced_pod(name, NAMESPACE)


def test_a_restarted_container_reports_only_its_own_last_output(
    core: client.CoreV1Api, scratch: Path
) -> None:
    """A container restarted in place keeps its earlier output in `kubectl logs`, but the
    termination message in lastState is the output of the run that ended, as a real kubelet
    keeps one log per run."""
    script = (
        "import os, pathlib\n"
        "runs = pathlib.Path(os.environ['RUNS_FILE'])\n"
        "n = len(runs.read_text()) + 1 if runs.exists() else 1\n"
        "runs.write_text('x' * n)\n"
        "raise SystemExit(f'run {n} failed')"
    )
    manifest = pod(unique("crashruns"), script, env={"RUNS_FILE": str(scratch / "runs")})
    manifest["spec"]["containers"][0]["terminationMessagePolicy"] = "FallbackToLogsOnError"
    name = create(core, manifest)
    terminated = wait_for(
        lambda: (
            (t := container_status(read(core, name)).get("lastState", {}).get("terminated"))
            and "run 1" not in t.get("message", "run 1")
            and t
        ),
        message="lastState.terminated of a later run",
    )
    assert terminated["message"].startswith("run ")
    assert terminated["message"].count("failed") == 1
    assert "run 1 failed" in logs(core, name)
    core.delete_namespaced_pod(name, NAMESPACE)


def test_a_crash_under_the_default_policy_has_no_termination_message(
    core: client.CoreV1Api,
) -> None:
    """terminationMessagePolicy File (the default) with no file written: no message."""
    name = create(core, pod(unique("crashfile"), CRASH_AT_START_UP, restart_policy="Never"))
    terminated = wait_for(
        lambda: container_status(read(core, name)).get("state", {}).get("terminated"),
        message="state.terminated",
    )
    assert terminated["exitCode"] == 1
    assert "message" not in terminated
    core.delete_namespaced_pod(name, NAMESPACE)


def test_failing_liveness_probe_restarts_container(core: client.CoreV1Api, scratch: Path) -> None:
    """A container whose liveness probe fails is killed and started again, counted as a restart."""
    gate = scratch / "live"
    gate.touch()
    manifest = pod(unique("live"), HEALTH_SERVER, env={"READY_FILE": str(gate)})
    # Like any liveness probe, it waits for the server to start before its first attempt.
    liveness = {**http_readiness(failure_threshold=2), "initialDelaySeconds": 1}
    manifest["spec"]["containers"][0]["livenessProbe"] = liveness
    name = create(core, manifest)
    wait_for(lambda: logs(core, name).count("probe 200") >= 1, message="a passing probe")
    gate.unlink()
    restarted = wait_for(
        lambda: (s := container_status(read(core, name))).get("restartCount", 0) >= 1 and s,
        message="a restart after the liveness probe failed",
    )
    assert "liveness" in restarted["lastState"]["terminated"]["message"]
    core.delete_namespaced_pod(name, NAMESPACE)


def test_missing_program_is_a_start_error(core: client.CoreV1Api) -> None:
    """A command that cannot be executed is retried with back-off and reported as StartError."""
    manifest = pod(unique("noexec"), None)
    manifest["spec"]["containers"][0]["command"] = ["/nonexistent/agent"]
    name = create(core, manifest)
    status = wait_for(
        lambda: (s := container_status(read(core, name))).get("restartCount", 0) >= 2 and s,
        message="two restarts",
    )
    assert status["lastState"]["terminated"]["reason"] == "StartError"
    assert status["lastState"]["terminated"]["exitCode"] == 128
    core.delete_namespaced_pod(name, NAMESPACE)


def test_never_restart_policy_fails_pod(core: client.CoreV1Api) -> None:
    """restartPolicy Never: a failing command leaves the pod Failed with its exit code."""
    name = create(core, pod(unique("never"), "raise SystemExit(4)", restart_policy="Never"))
    found = wait_for(
        lambda: (p := read(core, name)) and p["status"].get("phase") == "Failed" and p,
        message="pod Failed",
    )
    assert container_status(found)["state"]["terminated"]["exitCode"] == 4
    assert container_status(found)["restartCount"] == 0
    core.delete_namespaced_pod(name, NAMESPACE)


def test_pod_without_command_fails_clearly(core: client.CoreV1Api) -> None:
    """A pod with an image but no command fails with NoLocalCommand and says why."""
    name = create(core, pod(unique("image"), None))
    found = wait_for(
        lambda: (p := read(core, name)) and p["status"].get("phase") == "Failed" and p,
        message="pod Failed",
    )
    assert found["status"]["reason"] == "NoLocalCommand"
    assert "not its image" in found["status"]["message"]
    assert container_status(found)["state"]["waiting"]["reason"] == "NoLocalCommand"
    core.delete_namespaced_pod(name, NAMESPACE)
    wait_for(lambda: read(core, name) is None, message="pod removed")


def test_delete_ends_the_whole_process_group(core: client.CoreV1Api) -> None:
    """Deleting a pod ends its process and a child that ignores SIGTERM within the grace period,
    and the pod leaves the API only after they ended."""
    grace = 2
    name = create(core, pod(unique("family"), FAMILY, grace=grace))
    leader, child = wait_for(lambda: printed_pids(logs(core, name)), message="pids printed")
    assert alive(leader)
    assert alive(child)
    assert os.getpgid(child) == leader
    began = time.monotonic()
    core.delete_namespaced_pod(name, NAMESPACE)
    wait_for(lambda: read(core, name) is None, timeout=grace + 20, message="pod removed")
    assert not alive(leader)
    assert not alive(child)
    # The child ignores SIGTERM, so only the SIGKILL at the end of the grace period ends it.
    assert time.monotonic() - began < grace + 20


def test_kubectl_logs_and_wide_ips(core: client.CoreV1Api, kubectl: Kubectl) -> None:
    """`kubectl logs` shows a pod's output and `get pods -o wide` shows distinct loopback IPs."""
    label = unique("wide")
    # Ready by the probe, so the server has printed its line: without a probe a pod is Ready as
    # soon as its process starts, which on a loaded machine is before Python prints anything.
    probe = http_readiness()
    names = [
        create(core, pod(f"{label}-{i}", HEALTH_SERVER, readiness=probe, labels={"test": label}))
        for i in range(3)
    ]
    for name in names:
        wait_for(lambda name=name: condition(read(core, name), "Ready") == "True", message=name)
    output = kubectl("logs", names[0]).stdout
    assert f"pod {names[0]}" in output
    table = kubectl("get", "pods", "-l", f"test={label}", "-o", "wide").stdout.splitlines()
    header = table[0].split()
    ips = {row.split()[0]: row.split()[header.index("IP")] for row in table[1:]}
    assert set(ips) == set(names)
    assert all(ip.startswith("127.") and ip != "127.0.0.1" for ip in ips.values())
    assert len(set(ips.values())) == len(names)
    for name in names:
        assert f"serving on {ips[name]}" in logs(core, name)
        core.delete_namespaced_pod(name, NAMESPACE)


def test_env_from_secret_configmap_and_fields(core: client.CoreV1Api) -> None:
    """valueFrom secretKeyRef, configMapKeyRef and fieldRef reach the process's environment."""
    name = unique("env")
    core.create_namespaced_secret(
        NAMESPACE, {"metadata": {"name": name}, "stringData": {"token": "t0ken"}}
    )
    core.create_namespaced_config_map(
        NAMESPACE, {"metadata": {"name": name}, "data": {"m": "small"}}
    )
    manifest = pod(
        name,
        "import os; print('env', os.environ['TOKEN'], os.environ['MODEL'], os.environ['NS'], "
        "os.environ['POD_IP'] == os.environ['AGENT_HOST'] == os.environ['IP'], flush=True)",
        restart_policy="Never",
    )
    manifest["spec"]["containers"][0]["env"] += [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": name, "key": "token"}}},
        {"name": "MODEL", "valueFrom": {"configMapKeyRef": {"name": name, "key": "m"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    create(core, manifest)
    wait_for(
        lambda: (read(core, name) or {}).get("status", {}).get("phase") == "Succeeded",
        message="pod Succeeded",
    )
    assert "env t0ken small default True" in logs(core, name)
    core.delete_namespaced_pod(name, NAMESPACE)
    core.delete_namespaced_secret(name, NAMESPACE)
    core.delete_namespaced_config_map(name, NAMESPACE)


def test_many_pods_become_ready(core: client.CoreV1Api) -> None:
    """Fifty pods created at once all start on their own addresses and become Ready
    (bench/pods.py reports how long that takes)."""
    label = unique("many")
    names = [
        create(
            core,
            pod(f"{label}-{i}", HEALTH_SERVER, readiness=http_readiness(), labels={"test": label}),
        )
        for i in range(50)
    ]

    def ready() -> bool:
        listed = core.list_namespaced_pod(NAMESPACE, label_selector=f"test={label}")
        return sum(
            any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
            for p in listed.items
        ) == len(names)

    wait_for(ready, timeout=120, interval=0.2, message="all pods Ready")
    core.delete_collection_namespaced_pod(NAMESPACE, label_selector=f"test={label}")
    wait_for(
        lambda: not core.list_namespaced_pod(NAMESPACE, label_selector=f"test={label}").items,
        timeout=60,
        message="pods removed",
    )
