"""The four PATCH types: JSON merge patch, JSON patch, strategic merge patch and apply.

Pure functions over plain JSON values; the input is never mutated. Strategic merge knows the merge
keys of the built-in lists agentpool touches (containers and volumes by name, ports by
containerPort, conditions by type, ...) and the ``$patch``, ``$retainKeys``,
``$deleteFromPrimitiveList`` and ``$setElementOrder`` directives kubectl sends. ``writes`` calls
``apply_patch`` with the request's Content-Type.
"""

from __future__ import annotations

import copy
from typing import Any

from agentpool.local.apiserver.errors import ApiError, bad_request, unprocessable

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"
CUSTOM_PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, APPLY)

# Merge keys of lists in built-in kinds, by field name; ``ports`` depends on where it sits.
_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "conditions": "type",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "ownerReferences": "uid",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "podIPs": "ip",
    "readinessGates": "conditionType",
    "resourceClaims": "name",
    "topologySpreadConstraints": "topologyKey",
}
_PRIMITIVE_SETS = {"finalizers"}


def deep_copy(value: Any) -> Any:
    """A fast copy of JSON data (about five times quicker than ``copy.deepcopy``)."""
    if isinstance(value, dict):
        return {k: deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [deep_copy(v) for v in value]
    return value


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return deep_copy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise unprocessable(f"add operation does not apply: doc is missing path: {path}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _resolve(doc: Any, parts: list[str], path: str) -> Any:
    for part in parts:
        if isinstance(doc, dict) and part in doc:
            doc = doc[part]
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        else:
            raise unprocessable(f"doc is missing path: {path}: missing value")
    return doc


def _add(doc: Any, parts: list[str], value: Any, path: str, *, replace: bool) -> Any:
    if not parts:
        return value
    parent = _resolve(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise unprocessable(f"replace operation does not apply: doc is missing key: {path}")
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent) - (1 if replace else 0):
            if replace:
                parent[int(last)] = value
            else:
                parent.insert(int(last), value)
        else:
            raise unprocessable(f"add operation does not apply: doc is missing path: {path}")
    else:
        raise unprocessable(f"add operation does not apply: doc is missing path: {path}")
    return doc


def _remove(doc: Any, parts: list[str], path: str) -> Any:
    if not parts:
        raise unprocessable("remove operation does not apply: cannot remove the document root")
    parent = _resolve(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise unprocessable(f"remove operation does not apply: doc is missing path: {path}")


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902 on a copy; a failed ``test`` is a 422, as the API server answers it."""
    if not isinstance(ops, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = deep_copy(target)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op:
            raise bad_request(f"invalid JSON patch operation: {op!r}")
        kind, path = op["op"], str(op.get("path", ""))
        parts = _pointer(path)
        if kind == "add":
            doc = _add(doc, parts, deep_copy(op.get("value")), path, replace=False)
        elif kind == "replace":
            doc = _add(doc, parts, deep_copy(op.get("value")), path, replace=True)
        elif kind == "remove":
            _remove(doc, parts, path)
        elif kind == "test":
            if _resolve(doc, parts, path) != op.get("value"):
                raise unprocessable(f"testing value {path} failed: test failed")
        elif kind in ("move", "copy"):
            source = str(op.get("from", ""))
            value = copy.deepcopy(_resolve(doc, _pointer(source), source))
            if kind == "move":
                _remove(doc, _pointer(source), source)
            doc = _add(doc, parts, value, path, replace=False)
        else:
            raise bad_request(f"Unexpected kind: {kind}")
    return doc


def _merge_key(name: str, path: tuple[str, ...]) -> str | None:
    if name == "ports":
        return "port" if path[-1:] == ("spec",) and "containers" not in path else "containerPort"
    return _MERGE_KEYS.get(name)


def strategic_merge(target: Any, patch: Any, path: tuple[str, ...] = ()) -> Any:
    """Strategic merge patch for built-in kinds, keyed lists merged item by item."""
    if not isinstance(patch, dict):
        return deep_copy(patch)
    if patch.get("$patch") == "replace":
        return {k: deep_copy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$retainKeys", "$patch"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [v for v in result.get(field) or [] if v not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list):
            result[key] = _merge_list(result.get(key), value, key, (*path, key))
        else:
            result[key] = strategic_merge(result.get(key), value, (*path, key))
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(current: Any, patch: list[Any], name: str, path: tuple[str, ...]) -> list[Any]:
    existing = current if isinstance(current, list) else []
    if name in _PRIMITIVE_SETS:
        return existing + [v for v in patch if v not in existing]
    key = _merge_key(name, path[:-1])
    if key is None or not all(isinstance(v, dict) for v in patch):
        return [deep_copy(v) for v in patch if not (isinstance(v, dict) and "$patch" in v)]
    merged = list(existing)
    for item in patch:
        index = next(
            (
                i
                for i, old in enumerate(merged)
                if isinstance(old, dict) and old.get(key) == item.get(key)
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                merged.pop(index)
        elif index is None:
            merged.append(strategic_merge(None, item, path))
        else:
            merged[index] = strategic_merge(merged[index], item, path)
    return merged


def apply_patch(target: Any, patch: Any, content_type: str, *, custom: bool) -> Any:
    """Dispatch on Content-Type; strategic merge on a custom resource is a 415, as on a cluster."""
    if content_type == MERGE_PATCH:
        return merge_patch(target, patch)
    if content_type == JSON_PATCH:
        return json_patch(target, patch)
    if content_type == STRATEGIC and not custom:
        return strategic_merge(target, patch)
    if content_type == APPLY:
        return (merge_patch if custom else strategic_merge)(target, patch)
    raise ApiError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(CUSTOM_PATCH_TYPES if custom else (*CUSTOM_PATCH_TYPES, STRATEGIC)),
    )
