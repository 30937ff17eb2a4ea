"""OpenAPI documents, so ``kubectl apply -f`` and ``create`` validate on the server side.

``/openapi/v3`` indexes every served group-version; each group-version document carries a tagged
PATCH operation with a ``fieldValidation`` parameter per kind, which tells kubectl to send
``fieldValidation=Strict`` and skip client-side validation, plus component schemas (the CRD's own
schema for custom resources). The strategic-merge media type is never listed, so kubectl uses
its compiled-in types for built-ins and merge patches for custom resources. ``/openapi/v2``
answers an empty protobuf document as a safety net for kubectl's client-side path.
``handlers`` serves these.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from agentpool.local.apiserver.resources import Registry, ResourceType

Doc = dict[str, Any]
V2_CONTENT_TYPE = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
_PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
)


def _prefix(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _schema_name(rt: ResourceType, suffix: str = "") -> str:
    if rt.custom:
        reverse = ".".join(reversed(rt.group.split(".")))
        return f"{reverse}.{rt.version}.{rt.kind}{suffix}"
    short = rt.group.split(".")[0] if rt.group else "core"
    return f"io.k8s.api.{short}.{rt.version}.{rt.kind}{suffix}"


def group_version_doc(registry: Registry, group: str, version: str) -> Doc | None:
    kinds = registry.in_group_version(group, version)
    if not kinds:
        return None
    paths: Doc = {}
    schemas: Doc = {}
    for rt in kinds:
        gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        scope = "/namespaces/{namespace}" if rt.namespaced else ""
        path = f"/{_prefix(group, version)}{scope}/{rt.plural}/{{name}}"
        paths[path] = {
            "patch": {
                "operationId": f"patch{rt.kind}",
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
                "parameters": [
                    {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
                    {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
                ],
                "requestBody": {"content": {t: {} for t in _PATCH_TYPES}},
                "responses": {"200": {"description": "OK"}},
            }
        }
        body = dict(rt.schema) if rt.schema else {"type": "object"}
        schemas[_schema_name(rt)] = {**body, "x-kubernetes-group-version-kind": [gvk]}
        schemas[_schema_name(rt, "List")] = {
            "type": "object",
            "x-kubernetes-group-version-kind": [{**gvk, "kind": rt.list_kind}],
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def index(registry: Registry) -> Doc:
    entries = {}
    for group, version in registry.group_versions():
        doc = group_version_doc(registry, group, version)
        digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]
        prefix = _prefix(group, version)
        entries[prefix] = {"serverRelativeURL": f"/openapi/v3/{prefix}?hash={digest.upper()}"}
    return {"paths": entries}
