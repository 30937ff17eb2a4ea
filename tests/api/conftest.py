"""Fixtures for the API tests: the CRDs as the models generate them, and their schemas by kind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from agentpool.api.crds import render_crds
from agentpool.local.apiserver.schema.validation import crd_schema

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"


@pytest.fixture(scope="session")
def crds() -> dict[str, dict[str, Any]]:
    """Each generated CRD by file name, parsed."""
    return {name: yaml.safe_load(text) for name, text in render_crds().items()}


@pytest.fixture(scope="session")
def schemas(crds: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The openAPIV3Schema of each kind, by kind (AgentPool, PoolRun, AgentLease)."""
    return {crd["spec"]["names"]["kind"]: crd_schema(crd) for crd in crds.values()}
