"""What the API server refuses in any object's metadata and size, worded as the real one words it.

``ObjectMeta`` validation of apimachinery (v0.37): the name and ``generateName`` by the kind's
name rule, label keys and values, annotation keys and their 256 KiB total. Then the limits that
sit below validation: a request body over 3 MiB is refused before it is decoded (413), and an
object too large for etcd's default 1.5 MiB request limit is refused when it is stored (500
``etcdserver: request is too large``, as kube-apiserver v1.37 passes etcd's error on unmapped).
``writes`` calls these on every create and update; ``parsing`` reads bodies under the limit.
"""

from __future__ import annotations

import json
from typing import Any

from agentpool.local.apiserver.errors import ApiError, Cause
from agentpool.local.apiserver.registry import names
from agentpool.local.apiserver.resources import ResourceType

Obj = dict[str, Any]

#: kube-apiserver's MaxRequestBodyBytes: twice etcd's limit, as JSON shrinks into protobuf.
REQUEST_BODY_LIMIT = 3 * 1024 * 1024
#: etcd's default --max-request-bytes: the largest write it takes.
OBJECT_LIMIT = 1536 * 1024
#: The most bytes all of an object's annotation keys and values may take together.
ANNOTATIONS_LIMIT = 256 * 1024
#: ConfigMap data and Secret data (core.MaxSecretSize).
DATA_LIMIT = 1024 * 1024


def _invalid(field: str, value: str, message: str) -> Cause:
    return Cause(field, f"Invalid value: {json.dumps(value, ensure_ascii=False)}: {message}")


def name_causes(rt: ResourceType, meta: Obj) -> list[Cause]:
    """The name and generateName against the kind's name rule."""
    kind = rt.plural if rt.group in ("", "rbac.authorization.k8s.io") else ""
    causes: list[Cause] = []
    generate = meta.get("generateName")
    if isinstance(generate, str) and generate:
        for message in names.object_name(kind, generate, prefix=True):
            causes.append(_invalid("metadata.generateName", generate, message))
    name = str(meta.get("name") or "")
    for message in names.object_name(kind, name):
        causes.append(_invalid("metadata.name", name, message))
    return causes


def metadata_causes(rt: ResourceType, obj: Obj) -> list[Cause]:
    """Labels, annotations and the data limits of ConfigMaps and Secrets."""
    meta = obj["metadata"]
    causes: list[Cause] = []
    for key, value in (meta.get("labels") or {}).items():
        causes += [_invalid("metadata.labels", key, m) for m in names.label_key(key)]
        text = str(value)
        causes += [_invalid("metadata.labels", text, m) for m in names.label_value(text)]
    annotations = meta.get("annotations") or {}
    for key in annotations:
        causes += [_invalid("metadata.annotations", key, m) for m in names.label_key(key.lower())]
    size = sum(len(key.encode()) + len(str(value).encode()) for key, value in annotations.items())
    if size > ANNOTATIONS_LIMIT:
        message = f"Too long: may not be more than {ANNOTATIONS_LIMIT} bytes"
        causes.append(Cause("metadata.annotations", message, "FieldValueTooLong"))
    if rt.key in (("", "configmaps"), ("", "secrets")):
        causes += _data_causes(rt, obj)
    return causes


def _data_causes(rt: ResourceType, obj: Obj) -> list[Cause]:
    if rt.plural == "configmaps":
        # binaryData travels base64-encoded; its limit counts the decoded bytes.
        size = sum(len(str(v).encode()) for v in (obj.get("data") or {}).values())
        size += sum(len(str(v)) * 3 // 4 for v in (obj.get("binaryData") or {}).values())
        field = "[]"  # field.NewPath(""), the whole object, prints as []
    else:
        size = sum(len(str(v)) * 3 // 4 for v in (obj.get("data") or {}).values())
        field = "data"
    if size <= DATA_LIMIT:
        return []
    return [Cause(field, f"Too long: may not be more than {DATA_LIMIT} bytes", "FieldValueTooLong")]


def body_too_large() -> ApiError:
    return ApiError(
        413, "RequestEntityTooLarge", f"Request entity too large: limit is {REQUEST_BODY_LIMIT}"
    )


def check_stored_size(rt: ResourceType, obj: Obj) -> None:
    """Refuse an object etcd would refuse to store, with the error kube-apiserver passes on."""
    meta = obj["metadata"]
    key = f"/registry/{rt.group or 'core'}/{rt.plural}/{meta.get('namespace', '')}/{meta['name']}"
    size = len(json.dumps(obj, separators=(",", ":")).encode()) + len(key)
    if size > OBJECT_LIMIT:
        raise ApiError(500, "", "etcdserver: request is too large")
