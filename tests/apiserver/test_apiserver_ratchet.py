"""Root-level name rules on the local API server: checked on every write, ratcheting kept.

The PoolRun CRD has a root-level rule on ``self.metadata.name``; a status write must still leave
an unchanged spec out of validation, as a real API server's ratcheting does, or a run stored
before a limit existed could no longer record its progress.
"""

from __future__ import annotations

import pytest
import yaml

from agentpool.api.crds import render_crds
from agentpool.local.apiserver.errors import ApiError
from agentpool.local.apiserver.registry.core import WriteOptions
from agentpool.local.apiserver.registry.crds import resource_types
from agentpool.local.apiserver.registry.customs import custom_checks
from agentpool.local.apiserver.resources import ResourceType


def _poolruns() -> ResourceType:
    return resource_types(yaml.safe_load(render_crds()["poolruns.yaml"]))[0]


def _run(name: str, items: int) -> dict[str, object]:
    return {
        "apiVersion": "agentpool.dev/v1alpha1",
        "kind": "PoolRun",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"poolRef": {"name": "p"}, "source": {"items": list(range(items))}},
    }


def test_a_status_write_leaves_an_unchanged_spec_unvalidated() -> None:
    """A run stored with more items than the limit allows still takes status writes: its spec
    did not change, so only the metadata (for the name rule) and the status are validated."""
    rt = _poolruns()
    old = _run("run", 10_001)
    new = {**old, "status": {"phase": "Running", "total": 3}}
    stored, _ = custom_checks(rt, new, old, WriteOptions(), "run")
    assert stored["status"]["phase"] == "Running"
    assert stored["spec"] is old["spec"]


def test_the_name_rule_is_checked_on_create_by_the_local_api_server() -> None:
    """Creating a run with a 64-character name is a 422 whose message says the limit and why."""
    with pytest.raises(ApiError) as caught:
        custom_checks(_poolruns(), _run("r" * 64, 1), None, WriteOptions(), "r" * 64)
    assert caught.value.code == 422
    assert "a PoolRun's name is a label value on its result ConfigMaps" in str(caught.value)
