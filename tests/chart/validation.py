"""Validates rendered manifests the way an API server of a current Kubernetes release would.

Built-in kinds go through kubernetes-validate in strict mode (unknown fields are errors). That
tool only knows built-in kinds and raises ``SchemaNotFoundError`` for anything else, so custom
kinds are checked here instead: a kind whose CRD ships in the chart against that CRD's own
``openAPIV3Schema`` and scope, and the Prometheus Operator's ServiceMonitor and PrometheusRule,
whose CRDs are not ours to ship, against the part of their v1 schemas the chart uses, with unknown
fields refused.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate
from kubernetes_validate import utils as kv_utils

Manifest = dict[str, Any]

# The newest Kubernetes minor release kubernetes-validate has schemas for.
KUBE_VERSION = kv_utils.latest_version()

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}

# monitoring.coreos.com/v1 ServiceMonitor, restricted to the fields the chart may set.
SERVICE_MONITOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "endpoints"],
            "properties": {
                "jobLabel": {"type": "string"},
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "matchLabels": _STRING_MAP,
                        "matchExpressions": {"type": "array", "items": {"type": "object"}},
                    },
                },
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "any": {"type": "boolean"},
                        "matchNames": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string", "pattern": "^/"},
                            "honorLabels": {"type": "boolean"},
                            "scheme": {"enum": ["http", "https"]},
                            "interval": {
                                "type": "string",
                                "pattern": "^(0|(([0-9]+)(ms|s|m|h))+)$",
                            },
                            "scrapeTimeout": {
                                "type": "string",
                                "pattern": "^(0|(([0-9]+)(ms|s|m|h))+)$",
                            },
                        },
                    },
                },
            },
        },
    },
}

_DURATION = {"type": "string", "pattern": "^(0|(([0-9]+)(ms|s|m|h|d|w|y))+)$"}

# monitoring.coreos.com/v1 PrometheusRule, as its CRD describes a rule group and a rule: either
# an alert or a recording rule, with string labels and annotations.
PROMETHEUS_RULE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["groups"],
            "properties": {
                "groups": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["name", "rules"],
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "interval": _DURATION,
                            "limit": {"type": "integer"},
                            "partial_response_strategy": {"type": "string"},
                            "rules": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["expr"],
                                    "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
                                    "properties": {
                                        "alert": {"type": "string", "pattern": "^[A-Za-z_]\\w*$"},
                                        "record": {"type": "string"},
                                        "expr": {"type": "string", "minLength": 1},
                                        "for": _DURATION,
                                        "keep_firing_for": _DURATION,
                                        "labels": _STRING_MAP,
                                        "annotations": _STRING_MAP,
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}

# The Prometheus Operator's kinds whose CRDs are not ours to ship, checked against the part of
# their schemas the chart uses.
_MONITORING_SCHEMAS = {
    "ServiceMonitor": SERVICE_MONITOR_SCHEMA,
    "PrometheusRule": PROMETHEUS_RULE_SCHEMA,
}


class InvalidManifest(AssertionError):
    """A manifest that a current API server would refuse."""


def _name(manifest: Manifest) -> str:
    meta = manifest.get("metadata") or {}
    return f"{manifest.get('kind')}/{meta.get('namespace', '')}/{meta.get('name')}"


def _check_metadata(manifest: Manifest, *, namespaced: bool) -> None:
    meta = manifest.get("metadata")
    if not isinstance(meta, dict):
        raise InvalidManifest(f"{_name(manifest)}: metadata is missing")
    name = meta.get("name", "")
    if not isinstance(name, str) or not _DNS_SUBDOMAIN.match(name) or len(name) > 253:
        raise InvalidManifest(f"{_name(manifest)}: {name!r} is not a valid object name")
    if namespaced != ("namespace" in meta):
        scope = "namespaced" if namespaced else "cluster-scoped"
        raise InvalidManifest(f"{_name(manifest)}: a {scope} kind with the wrong metadata")
    for key in ("labels", "annotations"):
        try:
            jsonschema.validate(meta.get(key, {}), _STRING_MAP)
        except jsonschema.ValidationError as e:
            raise InvalidManifest(f"{_name(manifest)}: metadata.{key}: {e.message}") from e


def _crd_for(manifest: Manifest, crds: Sequence[Manifest]) -> tuple[Manifest, Manifest] | None:
    group, _, version = manifest["apiVersion"].rpartition("/")
    for crd in crds:
        spec = crd["spec"]
        if spec["group"] == group and spec["names"]["kind"] == manifest["kind"]:
            for served in spec["versions"]:
                if served["name"] == version and served.get("served", False):
                    return crd, served
    return None


def validate_manifest(manifest: Manifest, *, crds: Sequence[Manifest] = ()) -> None:
    """Raise InvalidManifest unless a current API server would accept the manifest."""
    try:
        kubernetes_validate.validate(manifest, KUBE_VERSION, strict=True)
        return
    except kv_utils.ValidationError as e:
        path = ".".join(str(p) for p in e.path)
        raise InvalidManifest(f"{_name(manifest)}: {path}: {e.message}") from e
    except kv_utils.SchemaNotFoundError:
        pass  # not a built-in kind: checked below

    found = _crd_for(manifest, crds)
    if found is not None:
        crd, version = found
        _check_metadata(manifest, namespaced=crd["spec"]["scope"] == "Namespaced")
        schema = version["schema"]["openAPIV3Schema"]
        body = {k: v for k, v in manifest.items() if k not in ("apiVersion", "kind", "metadata")}
        try:
            jsonschema.validate(body, schema)
        except jsonschema.ValidationError as e:
            raise InvalidManifest(f"{_name(manifest)}: {e.message}") from e
        return

    if (
        manifest["apiVersion"] == "monitoring.coreos.com/v1"
        and manifest["kind"] in _MONITORING_SCHEMAS
    ):
        _check_metadata(manifest, namespaced=True)
        try:
            jsonschema.validate(manifest, _MONITORING_SCHEMAS[manifest["kind"]])
        except jsonschema.ValidationError as e:
            raise InvalidManifest(f"{_name(manifest)}: {e.message}") from e
        return

    raise InvalidManifest(f"{_name(manifest)}: no schema for {manifest['apiVersion']}")
