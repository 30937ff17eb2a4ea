"""The local cluster as kubectl sees it: its context, its CRDs, the roles it starts with."""

from __future__ import annotations

import pytest
import yaml

from agentpool.api import roles
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


@pytest.mark.local_only("a real cluster has the chart's roles only where the chart is installed")
def test_the_charts_caller_role_is_there_to_bind(kubectl: Kubectl) -> None:
    """The local cluster starts with the ClusterRole the chart gives for binding callers of the
    gateway, `agentpool-caller`, with the rules the chart's is held to, so the gateway guide's
    `kubectl create rolebinding --clusterrole=agentpool-caller` grants a caller as printed."""
    role = kubectl.json("get", "clusterrole", roles.CALLER_ROLE)
    assert role["rules"] == roles.caller_rules()
