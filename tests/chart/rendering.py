"""Renders the Helm chart with the real Helm engine and reads facts back from the manifests.

The chart tests use it to check the chart, and a cluster test uses :func:`granted_rules` to
compare the RBAC the chart grants with the requests the local API server saw the operator make.
Helm runs in process through ``helm_python`` (the Helm v4 SDK over its Go library), so no
``helm`` binary is needed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = REPO_ROOT / "charts" / "agentpool"
RELEASE = "agentpool"
RELEASE_NAMESPACE = "agentpool-system"

Manifest = dict[str, Any]

# Grants that no request uses: admission plugins check them when the operator creates objects
# (OwnerReferencesPermissionEnforcement, for blockOwnerDeletion on agent pods and Secrets).
ADMISSION_ONLY = frozenset({("agentpool.dev", "agentpools/finalizers", "update")})


def render_chart(
    values: Mapping[str, Any] | None = None,
    *,
    release: str = RELEASE,
    namespace: str = RELEASE_NAMESPACE,
) -> list[Manifest]:
    """Every object the chart's templates render to (CRDs excluded), in template order."""
    with helm.Chart.load(CHART_DIR) as chart:
        rendered = chart.render(
            values=dict(values) if values is not None else None,
            name=release,
            namespace=namespace,
            is_install=True,
        )
    manifests: list[Manifest] = []
    for path in sorted(rendered):
        if path.endswith("NOTES.txt"):
            continue
        manifests.extend(doc for doc in yaml.safe_load_all(rendered[path]) if doc)
    return manifests


def render_notes(values: Mapping[str, Any] | None = None) -> str:
    """The NOTES.txt Helm prints after an install."""
    with helm.Chart.load(CHART_DIR) as chart:
        rendered = chart.render(
            values=dict(values) if values is not None else None,
            name=RELEASE,
            namespace=RELEASE_NAMESPACE,
            is_install=True,
        )
    return next(text for path, text in rendered.items() if path.endswith("NOTES.txt"))


def chart_crds() -> list[Manifest]:
    """The CustomResourceDefinitions Helm installs from the chart's crds/ before the templates."""
    with helm.Chart.load(CHART_DIR) as chart:
        files = chart.crds
    return [doc for file in files for doc in yaml.safe_load_all(file["data"]) if doc]


def find(manifests: list[Manifest], kind: str) -> list[Manifest]:
    """The manifests of one kind."""
    return [m for m in manifests if m["kind"] == kind]


def _rules(manifests: list[Manifest]) -> Iterator[Mapping[str, Any]]:
    """The rules of the Roles and ClusterRoles bound to the operator's own ServiceAccount (the
    chart's caller role, which users bind to their callers, is none of them)."""
    bound = {
        (binding["roleRef"]["kind"], binding["roleRef"]["name"])
        for binding in manifests
        if binding["kind"] in ("ClusterRoleBinding", "RoleBinding")
        and any(s.get("kind") == "ServiceAccount" for s in binding.get("subjects") or [])
    }
    for manifest in manifests:
        if (manifest["kind"], manifest["metadata"]["name"]) in bound:
            yield from manifest.get("rules") or []


#: The values of one operator pod acting alone (the chart's default is two sharing the pools).
ALONE = {"replicaCount": 1, "sharePools": False}


def granted_rules(values: Mapping[str, Any] | None = None) -> set[tuple[str, str, str]]:
    """Every (apiGroup, resource, verb) the chart grants the operator, over all its Roles.

    The core group is ``""`` and subresources keep their slash (``"poolruns/status"``), as in the
    RBAC rules themselves. Wildcards are returned as written, so a test comparing them with real
    requests fails on a ``"*"`` rather than silently accepting it.
    """
    granted: set[tuple[str, str, str]] = set()
    for rule in _rules(render_chart(values)):
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                for verb in rule.get("verbs", []):
                    granted.add((group, resource, verb))
    return granted


def granted_requests(values: Mapping[str, Any] | None = None) -> set[tuple[str, str]]:
    """The chart's grants as (verb, resource) pairs, the keys ``ApiServer.counts()`` uses,
    without the :data:`ADMISSION_ONLY` grants that no request exercises."""
    return {(verb, resource) for group, resource, verb in granted_rules(values) - ADMISSION_ONLY}
