"""The chart, rendered by the real Helm engine, applies cleanly with kubectl to the local cluster.

``helm install`` sends the chart's CRDs and then its templates to the API server; this does the
same with ``kubectl apply`` for the ways an admin installs the operator, and reads each object back.
Every kind the chart renders must be served and must apply. The chart ships kopf's peering CRDs,
so the peering objects of a two-replica install apply too; ServiceMonitor belongs to the
Prometheus Operator's CRD, which the chart does not ship, and is left to the chart tests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from chart.rendering import Manifest, chart_crds, render_chart
from cluster import ClusterHandle, Kubectl, wait_for

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.cluster,
    pytest.mark.local_only(
        "applies the chart's operator by hand; on a real cluster the Helm test installs it"
    ),
]

VALUE_SETS: dict[str, dict[str, Any] | None] = {
    "defaults": None,
    "two-replicas": {"replicaCount": 2, "sharePools": False},
    "namespaces-replicas-network-policy": {
        "watchNamespaces": ["team-a", "team-b"],
        "replicaCount": 2,
        "networkPolicy": {"enabled": True},
    },
}
NAMESPACE = "agentpool-system"


def _served(kubectl: Kubectl, api_version: str) -> set[str]:
    """The kinds the API server serves in one group version (none when it does not serve it)."""
    path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    result = kubectl("get", "--raw", path, check=False)
    if result.returncode != 0:
        return set()
    return {r["kind"] for r in json.loads(result.stdout)["resources"] if "/" not in r["name"]}


def _ensure_namespace(kubectl: Kubectl, name: str) -> None:
    manifest = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    kubectl("apply", "-f", "-", input=json.dumps(manifest))


def _namespaces(manifests: list[Manifest]) -> set[str]:
    return {m["metadata"]["namespace"] for m in manifests if m["metadata"].get("namespace")}


@pytest.mark.parametrize("name", VALUE_SETS)
def test_rendered_chart_applies_to_the_local_cluster(
    name: str, local_cluster: ClusterHandle, kubectl: Kubectl, tmp_path: Path
) -> None:
    """Every object the chart renders with these values (its CRDs first) is accepted by
    ``kubectl apply`` and can be read back."""
    if not local_cluster.local:
        pytest.skip("applying the chart installs the operator: use helm install on a real cluster")
    crds = chart_crds()
    crd_path = tmp_path / "crds.yaml"
    crd_path.write_text(yaml.safe_dump_all(crds, sort_keys=False))
    kubectl("apply", "-f", str(crd_path))
    for crd in crds:
        spec = crd["spec"]
        api_version = f"{spec['group']}/{spec['versions'][0]['name']}"
        wait_for(
            lambda: spec["names"]["kind"] in _served(kubectl, api_version),  # noqa: B023
            10,
            message=f"{spec['names']['kind']} served",
        )

    manifests = render_chart(VALUE_SETS[name], namespace=NAMESPACE)
    served: dict[str, set[str]] = {}
    for manifest in manifests:
        version = manifest["apiVersion"]
        if version not in served:
            served[version] = _served(kubectl, version)
    missing = sorted(
        {
            f"{m['kind']} ({m['apiVersion']})"
            for m in manifests
            if m["kind"] not in served[m["apiVersion"]]
        }
    )
    applicable = [m for m in manifests if m["kind"] in served[m["apiVersion"]]]
    for namespace in sorted(_namespaces(applicable)):
        _ensure_namespace(kubectl, namespace)

    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump_all(applicable, sort_keys=False))
    applied = kubectl("apply", "-f", str(path))
    lines = applied.stdout.splitlines()
    assert len(lines) == len(applicable), applied.stdout
    assert all(line.endswith(("created", "configured", "unchanged")) for line in lines), lines
    found = kubectl("get", "-f", str(path), "-o", "name").stdout.split()
    assert len(found) == len(applicable)

    assert not missing, "the local API server does not serve " + ", ".join(missing)
