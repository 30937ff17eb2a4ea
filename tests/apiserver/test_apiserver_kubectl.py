"""kubectl against the API server, as a user drives it: apply the project's CRDs, apply and get
AgentPools with their printer columns, see an invalid one refused with the CEL message, scale,
watch with a selector, patch in every type, delete with cascading, and wait."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from pathlib import Path

import pytest
from kubernetes import client as k8s

from agentpool.local.apiserver import LOG_PATH_ANNOTATION
from conftest import Cluster, Kubectl, eventually

CRDS = Path(__file__).resolve().parents[2] / "crds"


def _pool(name: str, *, min_size: int = 1, max_size: int = 2, labels: str = "") -> str:
    # No "labels: {}": a real API server stores empty labels as none, so kubectl would find a
    # change to make on every apply.
    label_line = f"  labels: {{{labels}}}\n" if labels else ""
    return (
        "apiVersion: agentpool.dev/v1alpha1\nkind: AgentPool\n"
        f"metadata:\n  name: {name}\n{label_line}"
        f"spec:\n  image: example/agent:1\n  minSize: {min_size}\n  maxSize: {max_size}\n"
    )


@pytest.fixture(scope="module")
def crds(kubectl: Kubectl) -> None:
    """The project's generated CRDs, applied as a user would."""
    assert any(CRDS.glob("*.yaml")), "crds/ is empty; run `agentpool crds`"
    result = kubectl.run("apply", "-f", str(CRDS))
    assert "agentpools.agentpool.dev" in result.stdout
    kubectl.run(
        "wait", "--for=condition=Established", "crd/agentpools.agentpool.dev", "--timeout=30s"
    )


@pytest.fixture
def apply(kubectl: Kubectl, namespace: str, tmp_path: Path) -> object:
    def run(text: str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
        path = tmp_path / f"m{time.monotonic_ns()}.yaml"
        path.write_text(text)
        return kubectl.run("apply", "-n", namespace, "-f", str(path), check=check)

    return run


def test_apply_and_get_with_printer_columns(
    crds: None, kubectl: Kubectl, namespace: str, apply: object
) -> None:
    """apply creates, re-apply is unchanged, get prints the CRD's columns."""
    assert "agentpool.agentpool.dev/ap1 created" in apply(_pool("ap1")).stdout  # type: ignore[operator]
    assert "unchanged" in apply(_pool("ap1")).stdout  # type: ignore[operator]
    assert "configured" in apply(_pool("ap1", max_size=3)).stdout  # type: ignore[operator]
    table = kubectl.run("get", "agentpools", "-n", namespace).stdout.splitlines()
    assert table[0].split() == ["NAME", "MIN", "MAX", "READY", "BUSY", "STATE", "AGE"]
    # MAX is the operator's status.maxSize (the ceiling in force), blank with no operator here.
    assert table[1].split()[:2] == ["ap1", "1"]
    short = kubectl.run("get", "ap", "ap1", "-n", namespace, "-o", "jsonpath={.spec.maxSize}")
    assert short.stdout == "3"
    category = kubectl.run("get", "agentpool-all", "-n", namespace).stdout
    assert "agentpool.agentpool.dev/ap1" in category


def test_invalid_pool_is_refused_with_the_cel_message(crds: None, apply: object) -> None:
    """minSize above maxSize is refused by the CRD's CEL rule, in the API server's words."""
    result = apply(_pool("bad", min_size=3, max_size=2), check=False)  # type: ignore[operator]
    assert result.returncode != 0
    assert (
        'The AgentPool "bad" is invalid: spec.maxSize: Invalid value: '
        "maxSize must be at least minSize" in result.stderr
    )


def test_unknown_field_is_refused_by_strict_validation(crds: None, apply: object) -> None:
    """kubectl's default validation makes the server refuse an unknown field."""
    text = _pool("typo") + "  minSise: 1\n"
    result = apply(text, check=False)  # type: ignore[operator]
    assert result.returncode != 0
    assert 'unknown field "spec.minSise"' in result.stderr


def test_scale(crds: None, kubectl: Kubectl, namespace: str, apply: object) -> None:
    """kubectl scale writes minSize through the scale subresource, with and without a guard."""
    apply(_pool("sc", min_size=1, max_size=5))  # type: ignore[operator]
    kubectl.run("scale", "ap", "sc", "-n", namespace, "--replicas=3")
    got = kubectl.run("get", "ap", "sc", "-n", namespace, "-o", "jsonpath={.spec.minSize}")
    assert got.stdout == "3"
    kubectl.run("scale", "ap", "sc", "-n", namespace, "--current-replicas=3", "--replicas=2")
    wrong = kubectl.run(
        "scale", "ap", "sc", "-n", namespace, "--current-replicas=9", "--replicas=1", check=False
    )
    assert "Expected replicas to be 9, was 2" in wrong.stderr


def test_patch_of_each_type(crds: None, kubectl: Kubectl, namespace: str, apply: object) -> None:
    """merge and json patches work on custom resources, strategic on built-ins, and strategic on
    a custom resource is refused as on a cluster."""
    apply(_pool("pt"))  # type: ignore[operator]
    kubectl.run(
        "patch", "ap", "pt", "-n", namespace, "--type=merge", "-p", '{"spec":{"maxSize":4}}'
    )
    kubectl.run(
        "patch",
        "ap",
        "pt",
        "-n",
        namespace,
        "--type=json",
        "-p",
        '[{"op":"replace","path":"/spec/minSize","value":2}]',
    )
    got = kubectl.run(
        "get", "ap", "pt", "-n", namespace, "-o", "jsonpath={.spec.minSize}/{.spec.maxSize}"
    )
    assert got.stdout == "2/4"
    refused = kubectl.run(
        "patch", "ap", "pt", "-n", namespace, "-p", '{"spec":{"maxSize":5}}', check=False
    )
    assert "application/strategic-merge-patch+json is not supported" in refused.stderr
    kubectl.run("create", "configmap", "cm", "-n", namespace, "--from-literal=a=1")
    kubectl.run("patch", "configmap", "cm", "-n", namespace, "-p", '{"data":{"b":"2"}}')
    data = kubectl.run("get", "cm", "cm", "-n", namespace, "-o", "jsonpath={.data}")
    assert data.stdout == '{"a":"1","b":"2"}'
    kubectl.run("label", "ap", "pt", "-n", namespace, "team=x")
    labelled = kubectl.run("get", "ap", "-n", namespace, "-l", "team=x", "-o", "name")
    assert labelled.stdout.strip() == "agentpool.agentpool.dev/pt"


def test_watch_with_selector(crds: None, kubectl: Kubectl, namespace: str, apply: object) -> None:
    """get -l ... -w prints the matching pool, then its changes, and nothing else."""
    apply(_pool("w1", labels="watch: 'yes'"))  # type: ignore[operator]
    command = [
        kubectl.binary,
        "--kubeconfig",
        str(kubectl.kubeconfig),
        "--context",
        kubectl.context,
        "--cache-dir",
        str(kubectl.cache_dir),
        "get",
        "ap",
        "-n",
        namespace,
        "-l",
        "watch=yes",
        "-w",
        "--request-timeout=30s",
    ]
    lines: list[str] = []
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) as process:
        assert process.stdout is not None
        reader = threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")))
        reader.start()
        try:
            eventually(
                lambda: any(line.startswith("w1 ") for line in lines),
                timeout=30,
                what="the watch to print w1",
            )
            apply(_pool("w2"))  # type: ignore[operator]
            kubectl.run(
                "patch", "ap", "w1", "-n", namespace, "--type=merge", "-p", '{"spec":{"minSize":2}}'
            )
            eventually(
                lambda: any(line.split()[:2] == ["w1", "2"] for line in lines),
                timeout=30,
                what="the watch to print w1's change",
            )
        finally:
            process.terminate()
            reader.join(10)
    assert not any(line.startswith("w2") for line in lines)


def test_delete_cascades_to_owned_objects(
    crds: None, kubectl: Kubectl, namespace: str, apply: object, api_client: k8s.ApiClient
) -> None:
    """Deleting a pool deletes a ConfigMap it owns."""
    apply(_pool("owner"))  # type: ignore[operator]
    uid = kubectl.run(
        "get", "ap", "owner", "-n", namespace, "-o", "jsonpath={.metadata.uid}"
    ).stdout
    owned = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: owned\n  ownerReferences:\n"
        "  - apiVersion: agentpool.dev/v1alpha1\n    kind: AgentPool\n    name: owner\n"
        f"    uid: {uid}\n"
    )
    apply(owned)  # type: ignore[operator]
    kubectl.run("delete", "ap", "owner", "-n", namespace)
    core = k8s.CoreV1Api(api_client)

    def gone() -> bool:
        names = [c.metadata.name for c in core.list_namespaced_config_map(namespace).items]
        return "owned" not in names

    eventually(gone, timeout=30, what="the owned ConfigMap to be collected")


def test_wait_for_condition(
    crds: None, kubectl: Kubectl, namespace: str, apply: object, api_client: k8s.ApiClient
) -> None:
    """kubectl wait times out while the condition is absent, and returns once it turns True."""
    apply(_pool("ready"))  # type: ignore[operator]
    custom = k8s.CustomObjectsApi(api_client)
    early = kubectl.run(
        "wait", "-n", namespace, "ap/ready", "--for=condition=Ready", "--timeout=1s", check=False
    )
    assert early.returncode != 0
    assert "timed out" in early.stderr
    waiting = subprocess.Popen(
        [
            kubectl.binary,
            "--kubeconfig",
            str(kubectl.kubeconfig),
            "--context",
            kubectl.context,
            "--cache-dir",
            str(kubectl.cache_dir),
            "wait",
            "-n",
            namespace,
            "ap/ready",
            "--for=condition=Ready",
            "--timeout=30s",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    status = {
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Warm",
                    "message": "agents are warm",
                    "lastTransitionTime": "2025-01-01T00:00:00Z",
                    "observedGeneration": 1,
                }
            ]
        }
    }
    custom.patch_namespaced_custom_object_status(
        "agentpool.dev", "v1alpha1", namespace, "agentpools", "ready", status
    )
    stdout, stderr = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, stderr
    assert "condition met" in stdout


def test_api_resources_and_logs(crds: None, kubectl: Kubectl) -> None:
    """api-resources lists the kinds with their short names."""
    listing = kubectl.run("api-resources", "--api-group=agentpool.dev").stdout
    assert "agentpools" in listing
    assert " ap " in listing


def test_server_side_apply_create_and_replace(
    crds: None, kubectl: Kubectl, namespace: str, tmp_path: Path
) -> None:
    """apply --server-side creates then updates; create -f and replace -f round-trip."""
    path = tmp_path / "ssa.yaml"
    path.write_text(_pool("ssa"))
    first = kubectl.run("apply", "--server-side", "-n", namespace, "-f", str(path))
    assert "serverside-applied" in first.stdout
    path.write_text(_pool("ssa", max_size=4))
    kubectl.run("apply", "--server-side", "-n", namespace, "-f", str(path))
    got = kubectl.run("get", "ap", "ssa", "-n", namespace, "-o", "jsonpath={.spec.maxSize}")
    assert got.stdout == "4"
    other = tmp_path / "create.yaml"
    other.write_text(_pool("made"))
    kubectl.run("create", "-n", namespace, "-f", str(other))
    other.write_text(_pool("made", max_size=5))
    kubectl.run("replace", "-n", namespace, "-f", str(other))
    got = kubectl.run("get", "ap", "made", "-n", namespace, "-o", "jsonpath={.spec.maxSize}")
    assert got.stdout == "5"


def test_create_generators_send_protobuf(kubectl: Kubectl, namespace: str) -> None:
    """kubectl create's generators (which post protobuf) make the objects they name."""
    kubectl.run("create", "secret", "generic", "s", "-n", namespace, "--from-literal=k=v")
    kubectl.run("create", "serviceaccount", "robot", "-n", namespace)
    kubectl.run("create", "service", "clusterip", "svc", "-n", namespace, "--tcp=80:8080")
    secret = kubectl.run("get", "secret", "s", "-n", namespace, "-o", "jsonpath={.data.k}")
    assert secret.stdout == "dg=="
    port = kubectl.run(
        "get",
        "svc",
        "svc",
        "-n",
        namespace,
        "-o",
        "jsonpath={.spec.ports[0].port}/{.spec.ports[0].targetPort}",
    )
    assert port.stdout == "80/8080"
    assert (
        kubectl.run("get", "sa", "robot", "-n", namespace, "-o", "name").stdout.strip()
        == "serviceaccount/robot"
    )


@pytest.mark.local_only("reads pod logs from files the local API server serves")
def test_pods_wide_and_logs(
    kubectl: Kubectl, namespace: str, cluster: Cluster, tmp_path: Path
) -> None:
    """get pods prints the usual columns (IP and NODE with -o wide); logs reads the pod's file."""
    cluster.require_local()
    log = tmp_path / "pod.log"
    log.write_text("hello\nworld\n")
    pod = (
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: lp\n  annotations:\n"
        f"    {LOG_PATH_ANNOTATION}: {log}\n"
        "spec:\n  containers:\n  - name: c\n    image: example/agent:1\n"
    )
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(pod)
    kubectl.run("apply", "-n", namespace, "-f", str(manifest))
    plain = kubectl.run("get", "pods", "-n", namespace).stdout.splitlines()
    assert plain[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert plain[1].split()[:4] == ["lp", "0/1", "Pending", "0"]
    wide = kubectl.run("get", "pods", "-n", namespace, "-o", "wide").stdout.splitlines()
    assert wide[0].split()[:7] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
    assert kubectl.run("logs", "lp", "-n", namespace).stdout == "hello\nworld\n"
    assert kubectl.run("logs", "lp", "-n", namespace, "--tail=1").stdout == "world\n"


def _event(name: str, kind: str, *, namespace: str, count: int, message: str) -> str:
    """An Event about ``kind``/quickstart in ``namespace`` (a real API server refuses an Event
    whose object is in another), as the operator posts them, seen ``count`` times."""
    return (
        f"apiVersion: v1\nkind: Event\nmetadata:\n  name: {name}\n"
        f"involvedObject:\n  apiVersion: agentpool.dev/v1alpha1\n  kind: {kind}\n"
        f"  name: quickstart\n  namespace: {namespace}\n"
        f"type: Normal\nreason: Tested\nmessage: {message}\ncount: {count}\n"
        "firstTimestamp: '2026-01-01T00:00:00Z'\nlastTimestamp: '2026-01-01T00:00:00Z'\n"
        "source:\n  component: agentpool\n"
    )


def _table(text: str) -> list[dict[str, str]]:
    """kubectl's table as one dict a row, each cell cut at its header's column, so an empty
    cell reads as '' rather than shifting the ones after it."""
    header, *lines = text.splitlines()
    names = re.findall(r"\S+(?: \S+)*", header)
    starts = [header.index(name) for name in names]
    spans = list(zip(names, starts, [*starts[1:], None], strict=True))
    return [{name: line[start:end].strip() for name, start, end in spans} for line in lines]


def test_events_print_as_a_real_server_prints_them(
    kubectl: Kubectl, namespace: str, apply: object
) -> None:
    """get events names each event's object as kind/name (agentpool/quickstart and
    poolrun/quickstart, not a bare quickstart that could be either), and -o wide adds the
    subobject, source, first seen, count and name, as kube-apiserver's event printer does."""
    apply(  # type: ignore[operator]
        _event("pool-event", "AgentPool", namespace=namespace, count=3, message="pool event")
        + "---\n"
        + _event("run-event", "PoolRun", namespace=namespace, count=1, message="run event")
    )
    plain = _table(kubectl.run("get", "events", "-n", namespace).stdout)
    assert list(plain[0]) == ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert sorted((row["OBJECT"], row["MESSAGE"]) for row in plain) == [
        ("agentpool/quickstart", "pool event"),
        ("poolrun/quickstart", "run event"),
    ]
    wide = _table(kubectl.run("get", "events", "-n", namespace, "-o", "wide").stdout)
    assert list(wide[0]) == [
        "LAST SEEN",
        "TYPE",
        "REASON",
        "OBJECT",
        "SUBOBJECT",
        "SOURCE",
        "MESSAGE",
        "FIRST SEEN",
        "COUNT",
        "NAME",
    ]
    pool = next(row for row in wide if row["NAME"] == "pool-event")
    assert (pool["OBJECT"], pool["SUBOBJECT"], pool["SOURCE"], pool["COUNT"]) == (
        "agentpool/quickstart",
        "",
        "agentpool",
        "3",
    )
    assert pool["FIRST SEEN"].endswith("d")  # months ago, in days as kubectl counts them
