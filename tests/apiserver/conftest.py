"""Fixtures for the API server conformance suite.

By default each session starts the local API server on a thread, serving HTTPS with a CA of
its own and requiring a bearer token as a real one does, and writes a kubeconfig for it; with
``--kube-context NAME`` the same tests run against that cluster instead, and the tests marked
local by nature (request counts, event-history expiry, log files) skip. Every test gets its
own namespace.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client as k8s

from agentpool.io.connection import Connection, make_api_client
from agentpool.local import pki
from agentpool.local.apiserver import ServerThread, serve_in_thread
from agentpool.local.apiserver.storage.store import HistoryLimits
from agentpool.local.kubeconfig import CONTEXT, ApiAccess, write_kubeconfig

T = TypeVar("T")
GROUP = "test.agentpool.dev"
VERSION = "v1"
PLURAL = "widgets"

WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {
            "plural": PLURAL,
            "singular": "widget",
            "kind": "Widget",
            "shortNames": ["wdg"],
            "categories": ["widget-all"],
        },
        "versions": [
            {
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": {
                    "status": {},
                    "scale": {
                        "specReplicasPath": ".spec.replicas",
                        "statusReplicasPath": ".status.replicas",
                        "labelSelectorPath": ".status.selector",
                    },
                },
                "additionalPrinterColumns": [
                    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                    {"name": "Color", "type": "string", "jsonPath": ".spec.color", "priority": 1},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["replicas"],
                                "properties": {
                                    "replicas": {"type": "integer", "minimum": 0},
                                    "maxReplicas": {"type": "integer", "default": 10},
                                    "color": {"type": "string", "enum": ["red", "blue"]},
                                    "tags": {"type": "array", "items": {"type": "string"}},
                                },
                                "x-kubernetes-validations": [
                                    {
                                        "rule": "self.replicas <= self.maxReplicas",
                                        "message": "replicas must not exceed maxReplicas",
                                        "fieldPath": ".replicas",
                                    }
                                ],
                            },
                            "status": {
                                "type": "object",
                                "properties": {
                                    "replicas": {"type": "integer"},
                                    "phase": {"type": "string"},
                                    "selector": {"type": "string"},
                                },
                            },
                        },
                    }
                },
            }
        ],
    },
}


def eventually(check: Callable[[], T | None], *, timeout: float = 10.0, what: str = "") -> T:
    """Poll ``check`` until it returns something truthy, failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what or check}")
        time.sleep(0.02)


#: What a real cluster's controllers put in every namespace (the root CA publisher's ConfigMap):
#: tests that list a namespace's ConfigMaps count only their own.
CLUSTER_MADE = frozenset({"kube-root-ca.crt"})


def own_names(items: Any) -> list[str]:
    """The names of listed objects, less those the cluster makes in every namespace."""
    names = [i["metadata"]["name"] if isinstance(i, dict) else i.metadata.name for i in items]
    return [name for name in names if name not in CLUSTER_MADE]


@dataclass
class Cluster:
    """Where the suite runs: the local server (``local`` set) or a real cluster."""

    kubeconfig: Path
    context: str
    local: ServerThread | None

    @property
    def access(self) -> ApiAccess:
        """The server, CA and token of the cluster's kubeconfig context."""
        return ApiAccess.from_kubeconfig(self.kubeconfig, context=self.context)

    def require_local(self) -> ServerThread:
        if self.local is None:
            pytest.skip("local by nature: inspects the local API server itself")
        return self.local


@pytest.fixture(scope="session")
def cluster(
    kube_context: str | None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    if kube_context:
        path = Path(os.environ.get("KUBECONFIG", Path.home() / ".kube" / "config"))
        yield Cluster(path, kube_context, None)
        return
    directory = tmp_path_factory.mktemp("kube")
    credentials = pki.load_or_create(directory / "pki")
    handle = serve_in_thread(
        history=HistoryLimits(events=200),
        bookmark_interval=0.5,
        tls=credentials.tls,
        token=credentials.token,
        signing_key=credentials.signing_key_pem,
    )
    path = write_kubeconfig(
        directory / "kubeconfig", ApiAccess(handle.url, credentials.ca_pem, credentials.token)
    )
    try:
        yield Cluster(path, CONTEXT, handle)
    finally:
        handle.stop()


@pytest.fixture(scope="session")
def api_client(cluster: Cluster) -> Iterator[k8s.ApiClient]:
    api = make_api_client(Connection(kubeconfig=str(cluster.kubeconfig), context=cluster.context))
    yield api
    api.close()


@pytest.fixture(scope="session")
def widgets(api_client: k8s.ApiClient) -> str:
    """The test CRD, applied once per session; returns its group."""
    ext = k8s.ApiextensionsV1Api(api_client)
    try:
        ext.create_custom_resource_definition(WIDGET_CRD)
    except k8s.ApiException as error:
        if error.status != 409:
            raise

    def established() -> bool:
        crd = ext.read_custom_resource_definition(f"{PLURAL}.{GROUP}")
        conditions = (crd.status and crd.status.conditions) or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    eventually(established, what="the Widget CRD to be established")
    return GROUP


@pytest.fixture
def namespace(api_client: k8s.ApiClient) -> Iterator[str]:
    core = k8s.CoreV1Api(api_client)
    ns = core.create_namespace({"metadata": {"generateName": "aptest-"}})
    name = str(ns.metadata.name)
    yield name
    try:
        core.delete_namespace(name)
    except k8s.ApiException as error:
        if error.status != 404:
            raise


@dataclass
class Kubectl:
    """kubectl with a kubeconfig and a cache dir of this session's own."""

    binary: str
    kubeconfig: Path
    context: str
    cache_dir: Path

    def run(
        self, *args: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        command = [
            self.binary,
            "--kubeconfig",
            str(self.kubeconfig),
            "--context",
            self.context,
            "--cache-dir",
            str(self.cache_dir),
            *args,
        ]
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} failed: {result.stderr}")
        return result


@pytest.fixture(scope="session")
def kubectl(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.skip("kubectl is not installed on this machine")
    return Kubectl(binary, cluster.kubeconfig, cluster.context, tmp_path_factory.mktemp("kcache"))


@dataclass
class Reply:
    """A raw API answer: status code, decoded JSON body, headers."""

    status: int
    body: Any
    headers: dict[str, str]


def raw(
    api: k8s.ApiClient,
    method: str,
    path: str,
    *,
    body: Any = None,
    content_type: str = "application/json",
    query: list[tuple[str, str]] | None = None,
    accept: str = "application/json",
) -> Reply:
    """One request through the client's own connection and credentials, answer undecoded."""
    headers = {"Content-Type": content_type, "Accept": accept}
    method, url, headers, payload, _ = api.param_serialize(
        method,
        path,
        query_params=query or [],
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api.call_api(method, url, headers, payload)
    response.read()
    text = response.data.decode() if response.data else ""
    decoded = json.loads(text) if text.strip().startswith(("{", "[")) else text
    return Reply(response.status, decoded, dict(response.getheaders()))
