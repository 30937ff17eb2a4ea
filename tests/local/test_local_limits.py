"""Names and inline runs past a real cluster's limits are refused at admission, saying why.

Driven with kubectl against the test cluster: the local one, or the real one named by
``--kube-context``, so both API servers are shown to evaluate the CRDs' rules alike. A pool with
the longest accepted name makes pods whose labels and names the API server accepts.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from agentpool.api import AgentPoolSpec
from agentpool.api.runs import MAX_INLINE_ITEMS
from agentpool.pool import manifests
from cluster import ClusterHandle, Kubectl, wait_for

AGENT = ["python", "-m", "agentpool.agent", "examples/agents/echo.py:agent"]


@pytest.fixture
def namespace(kubectl: Kubectl) -> Iterator[str]:
    """A namespace of the test's own, deleted afterwards with everything in it."""
    name = f"limits-{uuid.uuid4().hex[:8]}"
    kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        kubectl("delete", "namespace", name, "--wait=false", check=False)


def _pool(name: str, namespace: str) -> dict[str, Any]:
    container = {"name": "agent", "command": AGENT}
    return {
        "apiVersion": "agentpool.dev/v1alpha1",
        "kind": "AgentPool",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "image": "agentpool:0.1.0",
            "minSize": 1,
            "template": {"spec": {"containers": [container]}},
        },
    }


def _run(name: str, namespace: str, items: list[Any]) -> dict[str, Any]:
    return {
        "apiVersion": "agentpool.dev/v1alpha1",
        "kind": "PoolRun",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"poolRef": {"name": "p"}, "source": {"items": items}},
    }


def _create(kubectl: Kubectl, obj: dict[str, Any], *options: str) -> Any:
    # create, not apply: apply would copy a large run into an annotation and trip its own limit.
    return kubectl("create", "-f", "-", *options, input=json.dumps(obj), check=False)


def test_a_pool_name_of_64_characters_is_refused(kubectl: Kubectl, namespace: str) -> None:
    """The API server refuses a 64-character AgentPool name with the limit and its reason."""
    result = _create(kubectl, _pool("a" * 64, namespace))
    assert result.returncode != 0
    assert "an AgentPool's name is a label value on its pods, at most 63 characters" in (
        result.stderr
    )


def test_a_run_name_of_64_characters_is_refused(kubectl: Kubectl, namespace: str) -> None:
    """The API server refuses a 64-character PoolRun name, which labels its result ConfigMaps."""
    result = _create(kubectl, _run("r" * 64, namespace, [1]), "--dry-run=server")
    assert result.returncode != 0
    assert "a PoolRun's name is a label value on its result ConfigMaps" in result.stderr


def test_too_many_inline_items_are_refused_naming_the_alternatives(
    kubectl: Kubectl, namespace: str
) -> None:
    """A run of 10,001 inline items is refused with the bound; kubectl explain says to use a
    ConfigMap (source.configMapRef) or an HTTP source (source.http); 10,000 are accepted."""
    items = list(range(MAX_INLINE_ITEMS + 1))
    result = _create(kubectl, _run("big", namespace, items), "--dry-run=server")
    assert result.returncode != 0
    assert "spec.source.items: Too many: 10001: must have at most 10000 items" in result.stderr
    explained = kubectl("explain", "poolrun.spec.source.items").stdout
    assert "ConfigMap (configMapRef)" in " ".join(explained.split())
    assert "HTTP (http)" in " ".join(explained.split())
    accepted = _create(kubectl, _run("big", namespace, items[:-1]), "--dry-run=server")
    assert accepted.returncode == 0, accepted.stderr


def _labels_are_the_pool(pod: dict[str, Any], name: str) -> bool:
    labels = pod["metadata"]["labels"]
    return bool(labels[manifests.POOL_LABEL] == name and labels[manifests.NAME_LABEL] == name)


def test_a_pool_name_of_63_characters_makes_valid_pods(
    kubectl: Kubectl, local_cluster: ClusterHandle, namespace: str
) -> None:
    """A 63-character pool name is accepted; the API server takes the agent pod and the token
    Secret the operator would make for it, labels and names included, and on the local cluster
    (where the operator runs) its agent pod becomes Ready with those labels."""
    name = "p" * 63
    checked = _create(kubectl, _pool(name, namespace), "--dry-run=server", "-o", "json")
    assert checked.returncode == 0, checked.stderr
    pool = json.loads(checked.stdout)
    spec = AgentPoolSpec.model_validate(pool["spec"])
    for manifest in (manifests.agent_pod(pool, spec=spec), manifests.token_secret(pool, "token")):
        result = _create(kubectl, manifest, "--dry-run=server")
        assert result.returncode == 0, result.stderr
    if not local_cluster.local:
        return
    created = _create(kubectl, _pool(name, namespace))
    assert created.returncode == 0, created.stderr
    selector = manifests.pool_selector(name)

    def ready_pods() -> list[dict[str, Any]]:
        pods = kubectl.json("get", "pods", "-n", namespace, "-l", selector)["items"]
        return [
            pod
            for pod in pods
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in (pod.get("status") or {}).get("conditions") or []
            )
        ]

    pods = wait_for(ready_pods, 60, interval=0.5, message=f"a Ready agent pod of {name}")
    assert all(_labels_are_the_pool(pod, name) for pod in pods)
