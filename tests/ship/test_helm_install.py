"""On a real cluster: the chart installs with the real Helm engine, its operator runs under the
chart's own ServiceAccount and RBAC, and the quickstart ends Succeeded and Drained.

This is the install guide's path (README and docs/guides/install.md), with the operator's
Deployment run by the cluster's own controllers; a real authorizer refuses whatever the chart
does not grant, so a run that drains proves the grants suffice. The local API server authorizes
nothing and runs no Deployments, so the test needs a real cluster (``--kubeconfig`` or
``--kube-context``).

With ``AGENTPOOL_TEST_IMAGE`` naming the operator image CI built (``hack/image/build.sh``), the
chart installs that image and the quickstart pool's agents take it too, both annotated so the local
kubelet runs them inside it: the operator and the agents then run from the image, not from the
checkout, and the kubelet's ``Pulled`` Events name its digest (written to
``AGENTPOOL_IMAGE_REPORT`` for CI's log).
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import helm_python as helm
import pytest
import yaml

from agentpool.local.apiserver import LOG_PATH_ANNOTATION
from agentpool.local.kubelet.images import IMAGE_ANNOTATION
from chart.rendering import CHART_DIR
from cluster import ClusterHandle, Kubectl, wait_for
from ship.scenario import free_port

# The install, the operator's start and the run each have a deadline of their own, which together
# pass the suite's 300 s: the test's own time is theirs, so a run that did not complete says why.
pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.cluster,
    pytest.mark.slow,
    pytest.mark.timeout(600),
]

REPO = Path(__file__).resolve().parents[2]
RELEASE = "agentpool"
RELEASE_NAMESPACE = "agentpool-system"
BUILT_IMAGE = os.environ.get("AGENTPOOL_TEST_IMAGE", "")


def _what_was_there(kubectl: Kubectl, namespace: str, log_path: Path) -> str:
    """The quickstart's run, pool, pods and Events and the operator's last log lines, to say
    why a run did not complete."""
    parts = []
    for args in (
        ("get", "poolrun", "quickstart", "-n", namespace, "-o", "yaml"),
        ("get", "agentpool", "-n", namespace, "-o", "yaml"),
        ("get", "pods", "-A", "-o", "wide"),
        ("get", "events", "-n", namespace, "--sort-by=.lastTimestamp"),
        ("get", "events", "-n", RELEASE_NAMESPACE, "--sort-by=.lastTimestamp"),
    ):
        found = kubectl(*args, check=False)
        parts.append(f"$ kubectl {' '.join(args)}\n{found.stdout}{found.stderr}")
    log = log_path.read_text(errors="replace") if log_path.exists() else "(no log)"
    parts.append(f"the operator's log, last lines:\n{log[-6000:]}")
    return "the quickstart run did not complete:\n" + "\n".join(parts)


def _image_values() -> dict[str, Any]:
    """The chart's values that run the operator from the built image, if one is named."""
    if not BUILT_IMAGE:
        return {}
    repository, _, tag = BUILT_IMAGE.rpartition(":")
    return {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "podAnnotations": {IMAGE_ANNOTATION: "true"},
    }


def _quickstart() -> str:
    """The quickstart's manifests, its pool's agents on the built image where one is named."""
    documents = []
    for path in sorted((REPO / "examples" / "quickstart").glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document and document["kind"] == "AgentPool" and BUILT_IMAGE:
                document["spec"]["image"] = BUILT_IMAGE
                metadata = document["spec"]["template"].setdefault("metadata", {})
                metadata.setdefault("annotations", {})[IMAGE_ANNOTATION] = "true"
            if document:
                documents.append(document)
    return yaml.safe_dump_all(documents)


def _ran_from_image(kubectl: Kubectl, namespace: str, pod: str) -> str:
    """The kubelet's word that ``pod`` ran from the built image: its Pulled Event's message."""
    events = kubectl.json(
        "get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={pod}"
    )["items"]
    pulled = [e["message"] for e in events if e.get("reason") == "Pulled"]
    assert pulled, [(e.get("reason"), e.get("message")) for e in events]
    assert f"from image {BUILT_IMAGE} (sha256:" in pulled[0], pulled
    return pulled[0]


def _operator_pods(kubectl: Kubectl) -> list[dict[str, Any]]:
    selector = "app.kubernetes.io/name=agentpool,app.kubernetes.io/instance=agentpool"
    found = kubectl.json("get", "pods", "-n", RELEASE_NAMESPACE, "-l", selector)
    return list(found["items"])


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _run_row(kubectl: Kubectl, namespace: str) -> list[str]:
    lines = kubectl("get", "poolruns", "-n", namespace).stdout.splitlines()
    return lines[1].split()[:8] if len(lines) > 1 else []


def _call_through_the_gateway(kubectl: Kubectl, namespace: str, pod: dict[str, Any]) -> None:
    """A ServiceAccount bound to the chart's caller role calls the quickstart pool through the
    chart's gateway, its certificate checked for the Service's name with the published CA; one
    bound to nothing is refused."""
    kubectl("create", "serviceaccount", "caller", "-n", namespace)
    kubectl("create", "serviceaccount", "stranger", "-n", namespace)
    kubectl(
        *("create", "rolebinding", "caller", "-n", namespace),
        *("--clusterrole=agentpool-caller", f"--serviceaccount={namespace}:caller"),
    )
    published = kubectl.json("get", "configmap", "agentpool-gateway", "-n", namespace)["data"]
    url = urlsplit(published["url"])
    assert url.hostname == f"agentpool-gateway.{RELEASE_NAMESPACE}.svc"
    context = ssl.create_default_context(cadata=published["ca.crt"])

    def call(account: str) -> tuple[int, dict[str, Any]]:
        token = kubectl("create", "token", account, "-n", namespace).stdout.strip()
        body = json.dumps({"item": {"text": "through the gateway"}}).encode()
        head = (
            f"POST /v1/namespaces/{namespace}/agentpools/quickstart/call HTTP/1.1\r\n"
            f"Host: {url.netloc}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        # The Service has no cluster DNS here: the pod is reached at its own address, and its
        # certificate still checked for the Service's name.
        with (
            socket.create_connection((pod["status"]["podIP"], url.port), timeout=60) as raw,
            context.wrap_socket(raw, server_hostname=url.hostname) as tls,
        ):
            tls.sendall(head.encode() + body)
            answer = b"".join(iter(lambda: tls.recv(65536), b""))
        status_line, _, rest = answer.partition(b"\r\n")
        return int(status_line.split()[1]), json.loads(rest.partition(b"\r\n\r\n")[2])

    status, reply = call("caller")
    assert status == 200, reply
    assert reply["output"]["length"] == len('{"text":"through the gateway"}')
    status, reply = call("stranger")
    assert (status, reply["error"]["reason"]) == (403, "Forbidden")


def test_chart_operator_runs_the_quickstart_under_its_own_rbac(
    local_cluster: ClusterHandle, kubectl: Kubectl
) -> None:
    """``helm install`` of the chart starts the operator as the chart's ServiceAccount; the
    quickstart applied with kubectl then ends ``Succeeded Drained 37 3 0 40``, and a caller
    bound to the chart's caller role calls its pool through the chart's gateway."""
    if local_cluster.local:
        pytest.skip("the chart's operator runs from a Deployment under a real authorizer")
    namespace = f"quickstart-{uuid.uuid4().hex[:6]}"
    config = helm.Config(
        kubeconfig_path=str(local_cluster.kubeconfig),
        kube_context=local_cluster.context,
        namespace=RELEASE_NAMESPACE,
    )
    try:
        # The chart makes a Role in each namespace it watches, so the namespace comes first.
        kubectl("create", "namespace", namespace)
        with helm.Chart.load(CHART_DIR) as chart:
            config.install(
                chart,
                RELEASE,
                {
                    "watchNamespaces": [namespace],
                    # One pod, sharing the pools as the default does (its Leases under the
                    # chart's RBAC): two would both bind the health and metrics ports here.
                    "replicaCount": 1,
                    "logLevel": "debug",
                    # Pods of the local kubelet share the machine's network, where agents hold
                    # port 8080 on their own addresses: the operator binds free ports instead.
                    "healthPort": free_port(),
                    "metrics": {"enabled": True, "port": free_port()},
                    # The gateway on the pod's own loopback address, as servers here listen.
                    "gateway": {"port": free_port(), "host": "$(POD_IP)"},
                }
                | _image_values(),
                namespace=RELEASE_NAMESPACE,
                create_namespace=True,
                timeout=120,
            )
        pods = wait_for(
            lambda: [p for p in _operator_pods(kubectl) if _ready(p)],
            120,
            message="the chart's operator pod is Ready",
        )
        pod = pods[0]
        assert pod["spec"]["serviceAccountName"] == "agentpool"
        # The operator's credentials are the ServiceAccount token the kubelet gave its pod.
        log_path = Path(pod["metadata"]["annotations"][LOG_PATH_ANNOTATION])
        pod_kubeconfig = log_path.parent / "serviceaccount" / "kubeconfig"
        whoami = json.loads(
            subprocess.run(
                [
                    kubectl.binary,
                    "--kubeconfig",
                    str(pod_kubeconfig),
                    "auth",
                    "whoami",
                    "-o",
                    "json",
                ],
                capture_output=True,
                text=True,
                check=True,
                timeout=60,
            ).stdout
        )
        assert whoami["status"]["userInfo"]["username"] == (
            f"system:serviceaccount:{RELEASE_NAMESPACE}:agentpool"
        )

        kubectl("apply", "-n", namespace, "-f", "-", input=_quickstart())
        try:
            kubectl(
                "wait",
                "-n",
                namespace,
                "--for=condition=Complete",
                "poolrun/quickstart",
                "--timeout=240s",
                timeout=260,
            )
        except (subprocess.SubprocessError, AssertionError) as error:
            raise AssertionError(_what_was_there(kubectl, namespace, log_path)) from error
        assert _run_row(kubectl, namespace) == [
            "quickstart",
            "quickstart",
            "Succeeded",
            "Drained",
            "37",
            "3",
            "0",
            "40",
        ]
        _call_through_the_gateway(kubectl, namespace, pod)
        if BUILT_IMAGE:
            agents = kubectl.json("get", "pods", "-n", namespace, "-l", "agentpool.dev/pool")
            report = [
                f"operator pod {pod['metadata']['name']}: "
                + _ran_from_image(kubectl, RELEASE_NAMESPACE, pod["metadata"]["name"])
            ]
            assert agents["items"], "the quickstart pool has no agent pods"
            for agent in agents["items"]:
                name = agent["metadata"]["name"]
                report.append(f"agent pod {name}: " + _ran_from_image(kubectl, namespace, name))
            destination = os.environ.get("AGENTPOOL_IMAGE_REPORT")
            if destination:
                Path(destination).write_text("\n".join(report) + "\n")
        log = log_path.read_text(errors="replace")
        assert "Forbidden" not in log, log[-3000:]
    finally:
        kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=false", check=False)
        config.uninstall(RELEASE, ignore_not_found=True, timeout=60)
        wait_for(lambda: not _operator_pods(kubectl), 120, message="the operator pod is gone")
        config.close()


def test_an_upgrade_to_shared_pools_waits_for_the_operator_acting_alone_to_stop(
    local_cluster: ClusterHandle, kubectl: Kubectl
) -> None:
    """An operator installed to act alone knows nothing of pods that share the pools: upgraded
    onto it as it runs, they would work beside it on the same pools. Helm refuses that upgrade,
    saying how to stop it first; once it is scaled to zero, the same upgrade goes through."""
    if local_cluster.local:
        pytest.skip("the chart reads the running Deployment with lookup: a real API server's")
    release, release_namespace = "agentpool-guard", "agentpool-guard-system"
    served = f"guard-{uuid.uuid4().hex[:6]}"
    config = helm.Config(
        kubeconfig_path=str(local_cluster.kubeconfig),
        kube_context=local_cluster.context,
        namespace=release_namespace,
    )
    # Nothing of it is called or probed: one pod serving a namespace with nothing in it.
    values = {
        "watchNamespaces": [served],
        "replicaCount": 1,
        "healthPort": free_port(),
        "metrics": {"enabled": False},
        "gateway": {"enabled": False},
        "podDisruptionBudget": {"enabled": False},
    } | _image_values()
    try:
        kubectl("create", "namespace", served)
        with helm.Chart.load(CHART_DIR) as chart:
            config.install(
                chart,
                release,
                {**values, "sharePools": False},
                namespace=release_namespace,
                create_namespace=True,
                timeout=120,
            )
            with pytest.raises(Exception, match="does not share the pools") as refused:
                config.upgrade(
                    chart, release, values, namespace=release_namespace, dry_run="server"
                )
            assert f"scale deployment/{release} --replicas=0" in str(refused.value)
            kubectl("scale", "-n", release_namespace, f"deployment/{release}", "--replicas=0")
            config.upgrade(chart, release, values, namespace=release_namespace, dry_run="server")
    finally:
        kubectl("delete", "namespace", served, "--ignore-not-found", "--wait=false", check=False)
        config.uninstall(release, ignore_not_found=True, timeout=60)
        config.close()
