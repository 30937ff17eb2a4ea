"""The local cluster as kubectl sees it: kubeconfig context, CRDs served, the pods' node."""

from __future__ import annotations

import pytest
import yaml

from cluster import ClusterHandle, Kubectl


@pytest.mark.local_only("reads the kubeconfig the local cluster writes")
def test_kubeconfig_names_the_local_context(local_cluster: ClusterHandle) -> None:
    """DIR/kubeconfig has the agentpool-local context pointing at the running API server."""
    if not local_cluster.local:
        pytest.skip("the kubeconfig is written only by the local cluster")
    config = yaml.safe_load(local_cluster.kubeconfig.read_text())
    assert config["current-context"] == "agentpool-local"
    assert config["clusters"][0]["cluster"]["server"] == local_cluster.url


def test_crds_are_served(kubectl: Kubectl) -> None:
    """The agentpool CRDs are applied, so kubectl knows the three kinds and their short names."""
    resources = kubectl("api-resources", "--api-group=agentpool.dev", "-o", "name").stdout.split()
    assert sorted(resources) == [
        "agentleases.agentpool.dev",
        "agentpools.agentpool.dev",
        "poolruns.agentpool.dev",
    ]
    assert kubectl("get", "ap", check=False).returncode == 0
