"""The generated CRDs: what they declare, and that `agentpool crds --check` catches drift."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from pydantic import Field

from agentpool import cli
from agentpool.api import AgentPoolSpec, crds
from agentpool.api.crds import render_crds
from agentpool.local.apiserver.schema.structural import apply_defaults
from agentpool.local.apiserver.schema.validation import validate

ROOT = Path(__file__).resolve().parents[2]


def test_committed_crds_match_the_models(capsys: pytest.CaptureFixture[str]) -> None:
    """`agentpool crds --check` passes on the repository as committed."""
    assert cli.main(["crds", "--check", "--out", str(ROOT / "crds")]) == 0
    assert "match the models" in capsys.readouterr().out


def test_check_names_the_file_when_a_model_changes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A new field on AgentPoolSpec without regenerating fails the check, naming agentpools.yaml."""

    class ChangedSpec(AgentPoolSpec):
        warm_cache: bool = Field(default=False)
        """A field added to the model after the CRDs were generated."""

    kinds = tuple(
        replace(info, spec=ChangedSpec) if info.kind == "AgentPool" else info for info in crds.KINDS
    )
    monkeypatch.setattr(crds, "KINDS", kinds)
    assert "warmCache" in render_crds()["agentpools.yaml"]

    assert cli.main(["crds", "--check", "--out", str(ROOT / "crds")]) == 1
    err = capsys.readouterr().err
    assert "agentpools.yaml" in err
    assert "poolruns.yaml" not in err
    assert "agentleases.yaml" not in err


def test_check_names_an_edited_or_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A hand-edited CRD and a deleted one both fail the check, each named; the rest pass."""
    out = tmp_path / "crds"
    shutil.copytree(ROOT / "crds", out)
    edited = out / "poolruns.yaml"
    edited.write_text(edited.read_text().replace("minimum: 1", "minimum: 0", 1))
    (out / "agentleases.yaml").unlink()

    assert cli.main(["crds", "--check", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert str(edited) in err
    assert str(out / "agentleases.yaml") in err
    assert "agentpools.yaml" not in err


def test_crds_writes_files_that_then_pass_the_check(tmp_path: Path) -> None:
    """`agentpool crds --out DIR` writes the three files, and a check of DIR passes."""
    out = tmp_path / "fresh"
    assert cli.main(["crds", "--out", str(out)]) == 0
    assert sorted(path.name for path in out.iterdir()) == [
        "agentleases.yaml",
        "agentpools.yaml",
        "poolruns.yaml",
    ]
    assert cli.main(["crds", "--check", "--out", str(out)]) == 0


def test_rendering_is_deterministic() -> None:
    """Two renders give identical text, so the check never fails on noise."""
    assert render_crds() == render_crds()


@pytest.mark.parametrize(
    ("filename", "kind", "short_name"),
    [
        ("agentpools.yaml", "AgentPool", "ap"),
        ("poolruns.yaml", "PoolRun", "pr"),
        ("agentleases.yaml", "AgentLease", "al"),
    ],
)
def test_names_and_status_subresource(
    crds: dict[str, dict[str, Any]], filename: str, kind: str, short_name: str
) -> None:
    """Each CRD has the project's group, version, kind, short name and category, and /status."""
    crd = crds[filename]
    spec = crd["spec"]
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == f"{spec['names']['plural']}.agentpool.dev"
    assert spec["group"] == "agentpool.dev"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == kind
    assert spec["names"]["shortNames"] == [short_name]
    assert spec["names"]["categories"] == ["agentpool-all"]
    [version] = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"]["status"] == {}


def test_agentpool_scale_subresource(crds: dict[str, dict[str, Any]]) -> None:
    """AgentPool scales through spec.minSize and status.replicas, with status.selector."""
    [version] = crds["agentpools.yaml"]["spec"]["versions"]
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.minSize",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    for other in ("poolruns.yaml", "agentleases.yaml"):
        [version] = crds[other]["spec"]["versions"]
        assert "scale" not in version["subresources"]


@pytest.mark.parametrize(
    ("filename", "columns"),
    [
        ("agentpools.yaml", ["MIN", "MAX", "READY", "BUSY", "STATE", "AGE"]),
        ("poolruns.yaml", ["POOL", "PHASE", "RESULT", "DONE", "FAILED", "ACTIVE", "TOTAL", "AGE"]),
        ("agentleases.yaml", ["POOL", "PHASE", "AGENT", "TTL", "AGE"]),
    ],
)
def test_default_printer_columns(
    crds: dict[str, dict[str, Any]], filename: str, columns: list[str]
) -> None:
    """`kubectl get` shows the documented columns in its order; wide adds more (priority 1)."""
    [version] = crds[filename]["spec"]["versions"]
    shown = [col["name"] for col in version["additionalPrinterColumns"] if not col.get("priority")]
    assert shown == columns


def test_result_column_says_it_is_not_the_outcome(crds: dict[str, dict[str, Any]]) -> None:
    """A run failed by its items shows RESULT Drained beside PHASE Failed; the column's and the
    field's descriptions say so, so a reader of `kubectl explain` does not take Drained for
    success."""
    [version] = crds["poolruns.yaml"]["spec"]["versions"]
    [column] = [c for c in version["additionalPrinterColumns"] if c["name"] == "RESULT"]
    assert "not whether the run succeeded" in column["description"]
    field = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["result"]
    description = " ".join(field["description"].split())
    assert "shows Drained beside phase Failed" in description


@pytest.mark.parametrize("filename", ["agentpools.yaml", "poolruns.yaml", "agentleases.yaml"])
def test_crds_are_valid_customresourcedefinitions(
    crds: dict[str, dict[str, Any]], filename: str
) -> None:
    """Each CRD passes Kubernetes' own CustomResourceDefinition schema in strict mode."""
    kubernetes_validate.validate(crds[filename], "1.32", strict=True)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"cap": 16}, "spec.cap"),
        ({"poolRef": {"name": "other"}}, "spec.poolRef"),
        ({"checkoutTimeoutSeconds": 5}, "spec.checkoutTimeoutSeconds"),
        ({"itemId": None}, "spec.itemId"),
    ],
)
def test_a_run_refuses_changes_to_what_it_read_when_it_started(
    schemas: dict[str, Any], change: dict[str, Any], field: str
) -> None:
    """Changing cap, the pool, a timeout (even adding one) or the item id of an existing run is
    refused with a message that says what may change instead; suspend and the TTL may change."""
    schema = schemas["PoolRun"]
    meta = {"name": "run"}
    spec = {"poolRef": {"name": "p"}, "source": {"items": [1]}, "itemId": "id", "cap": 4}
    created = apply_defaults(schema, {"metadata": meta, "spec": spec})
    changed_spec = {k: v for k, v in {**spec, **change}.items() if v is not None}
    changed = apply_defaults(schema, {"metadata": meta, "spec": changed_spec})
    errors = validate(schema, changed, old=created)
    assert [error.field for error in errors] == [field]
    assert "only suspend and ttlSecondsAfterFinished can" in errors[0].message
    allowed = apply_defaults(
        schema,
        {"metadata": meta, "spec": {**spec, "suspend": True, "ttlSecondsAfterFinished": 60}},
    )
    assert validate(schema, allowed, old=created) == []
