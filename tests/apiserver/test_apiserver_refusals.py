"""Every invalid resource in tests/data is refused by the API server itself, in its own words.

The pure validator's tests check the same files against the generated CRDs; here kubectl sends
each one to the cluster (``--dry-run=server``), so the local API server and a real one must both
refuse it, naming the same field with the same message. This is how the real server's wording of
CEL errors (no value shown for an object) and of property counts was found and matched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import Kubectl

DATA = Path(__file__).resolve().parents[1] / "data" / "invalid"
CRDS = Path(__file__).resolve().parents[2] / "crds"
EXPECT_FIELD = "test.agentpool.dev/field"
EXPECT_MESSAGE = "test.agentpool.dev/message"


def _invalid() -> list[Path]:
    return sorted(DATA.glob("*.yaml"))


@pytest.fixture(scope="module")
def crds(kubectl: Kubectl) -> None:
    kubectl.run("apply", "-f", str(CRDS))
    kubectl.run("wait", "--for=condition=Established", "-f", str(CRDS), "--timeout=30s")


@pytest.mark.parametrize("path", _invalid(), ids=lambda p: p.stem)
def test_the_api_server_refuses_each_invalid_resource_naming_the_field(
    path: Path, crds: None, kubectl: Kubectl
) -> None:
    """The refusal names the expected field and carries the expected message."""
    manifest: dict[str, Any] = yaml.safe_load(path.read_text())
    annotations = manifest["metadata"]["annotations"]
    result = kubectl.run("create", "--dry-run=server", "-f", str(path), check=False)
    assert result.returncode != 0, f"{path.name} was accepted"
    expected = f"{annotations[EXPECT_FIELD]}: {annotations[EXPECT_MESSAGE]}"
    assert expected in result.stderr, result.stderr


def _crd_with_rule(rule: str) -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "free": {
                        "type": "array",
                        "items": {"x-kubernetes-preserve-unknown-fields": True},
                    },
                    "count": {"type": "integer"},
                },
                "x-kubernetes-validations": [{"rule": rule}],
            }
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.refusals.agentpool.dev"},
        "spec": {
            "group": "refusals.agentpool.dev",
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


@pytest.mark.parametrize(
    ("rule", "refused"),
    [
        ("has(self.free) || self.count > 0", "undefined field 'free'"),
        ("self.missing > 0", "undefined field 'missing'"),
        ("self.count > 0", None),
    ],
)
def test_a_crd_rule_that_names_a_field_cel_cannot_see_is_refused(
    rule: str, refused: str | None, kubectl: Kubectl, tmp_path: Path
) -> None:
    """A rule over a field with no schema type (free JSON) or no schema at all does not compile
    on a real API server, so the CRD is refused at once rather than failing every write."""
    path = tmp_path / "crd.yaml"
    path.write_text(yaml.safe_dump(_crd_with_rule(rule)))
    result = kubectl.run("create", "--dry-run=server", "-f", str(path), check=False)
    if refused is None:
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode != 0
        assert refused in result.stderr, result.stderr
