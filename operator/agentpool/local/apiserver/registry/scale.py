"""The scale subresource: an ``autoscaling/v1`` Scale view of a custom resource.

The CRD's ``scale`` stanza names where replicas live (``specReplicasPath``,
``statusReplicasPath``, ``labelSelectorPath``); ``scale_of`` reads them into a Scale and
``apply_scale`` writes a Scale's ``spec.replicas`` back. ``writes`` and ``handlers`` call both.
"""

from __future__ import annotations

from typing import Any

from agentpool.local.apiserver.errors import ApiError, bad_request
from agentpool.local.apiserver.resources import ResourceType

Obj = dict[str, Any]


def _steps(path: str) -> list[str]:
    return [step for step in path.lstrip(".").split(".") if step]


def _read(obj: Obj, path: str) -> Any:
    value: Any = obj
    for step in _steps(path):
        if not isinstance(value, dict):
            return None
        value = value.get(step)
    return value


def _require(rt: ResourceType) -> None:
    if rt.scale is None:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")


def scale_of(rt: ResourceType, obj: Obj) -> Obj:
    _require(rt)
    assert rt.scale is not None
    meta = obj["metadata"]
    status: Obj = {"replicas": _read(obj, rt.scale.status_replicas_path) or 0}
    if rt.scale.label_selector_path:
        selector = _read(obj, rt.scale.label_selector_path)
        if selector:
            status["selector"] = selector
    scale_meta = {
        k: meta[k]
        for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
        if k in meta
    }
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": scale_meta,
        "spec": {"replicas": _read(obj, rt.scale.spec_replicas_path) or 0},
        "status": status,
    }


def apply_scale(rt: ResourceType, obj: Obj, scale: Obj) -> Obj:
    """A copy of ``obj`` with the Scale's ``spec.replicas`` written to ``specReplicasPath``."""
    _require(rt)
    assert rt.scale is not None
    replicas = (scale.get("spec") or {}).get("replicas")
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise bad_request(
            f"spec.replicas: Invalid value: {replicas!r}: must be a non-negative integer"
        )
    steps = _steps(rt.scale.spec_replicas_path)
    result = dict(obj)
    cursor = result
    for step in steps[:-1]:
        child = cursor.get(step)
        cursor[step] = dict(child) if isinstance(child, dict) else {}
        cursor = cursor[step]
    cursor[steps[-1]] = replicas
    return result
