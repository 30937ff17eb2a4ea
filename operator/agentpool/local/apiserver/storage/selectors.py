"""Label and field selectors, parsed once per request into predicates over stored objects.

The grammar is the API server's: label requirements ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``,
``k notin (a,b)``, ``k`` and ``!k`` joined by commas; field requirements ``path=v``, ``path==v``
and ``path!=v`` over the fields each resource supports (``metadata.name`` and
``metadata.namespace`` everywhere, a few more for pods, events and secrets). Reads and watches
in ``handlers`` and ``watch`` call ``label_selector`` and ``field_selector``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from agentpool.local.apiserver.errors import bad_request
from agentpool.local.apiserver.resources import ResourceType

Predicate = Callable[[dict[str, Any]], bool]

_SET_RE = re.compile(r"^\s*(!?)\s*([A-Za-z0-9_./-]+)\s*(?:(notin|in)\s*\(([^)]*)\))?\s*$")
_EQ_RE = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s*(==|!=|=)\s*([A-Za-z0-9_.-]*)\s*$")

_POD_FIELDS: dict[str, tuple[str, ...]] = {
    "spec.nodeName": ("spec", "nodeName"),
    "spec.restartPolicy": ("spec", "restartPolicy"),
    "spec.schedulerName": ("spec", "schedulerName"),
    "spec.serviceAccountName": ("spec", "serviceAccountName"),
    "status.phase": ("status", "phase"),
    "status.podIP": ("status", "podIP"),
}
_EVENT_FIELDS: dict[str, tuple[str, ...]] = {
    f"involvedObject.{f}": ("involvedObject", f)
    for f in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
} | {
    "reason": ("reason",),
    "type": ("type",),
    "source": ("source", "component"),
    "reportingComponent": ("reportingComponent",),
}
_EXTRA_FIELDS: dict[tuple[str, str], dict[str, tuple[str, ...]]] = {
    ("", "pods"): _POD_FIELDS,
    ("", "events"): _EVENT_FIELDS,
    ("", "secrets"): {"type": ("type",)},
    ("", "namespaces"): {"status.phase": ("status", "phase")},
}


def _split(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def _label_requirement(text: str) -> Callable[[dict[str, str]], bool]:
    eq = _EQ_RE.match(text)
    if eq:
        key, op, value = eq.groups()
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    found = _SET_RE.match(text)
    if not found:
        raise bad_request(f"unable to parse requirement: {text.strip()!r}")
    bang, key, op, values = found.groups()
    if op is None:
        return (lambda labels: key not in labels) if bang else (lambda labels: key in labels)
    if bang:
        raise bad_request(f"unable to parse requirement: {text.strip()!r}")
    members = {v.strip() for v in values.split(",") if v.strip()}
    if op == "in":
        return lambda labels: labels.get(key) in members
    return lambda labels: labels.get(key) not in members


def label_selector(text: str | None) -> Predicate | None:
    """A predicate for ``labelSelector``, or None when it selects everything."""
    if not text or not text.strip():
        return None
    requirements = [_label_requirement(part) for part in _split(text)]

    def matches(obj: dict[str, Any]) -> bool:
        labels = obj["metadata"].get("labels") or {}
        return all(requirement(labels) for requirement in requirements)

    return matches


def _lookup(obj: dict[str, Any], path: tuple[str, ...]) -> str:
    value: Any = obj
    for step in path:
        if not isinstance(value, dict):
            return ""
        value = value.get(step)
    return "" if value is None else str(value)


def field_selector(text: str | None, rt: ResourceType) -> Predicate | None:
    """A predicate for ``fieldSelector``; an unsupported field is a 400, as on a real server."""
    if not text or not text.strip():
        return None
    supported: dict[str, tuple[str, ...]] = {
        "metadata.name": ("metadata", "name"),
        "metadata.namespace": ("metadata", "namespace"),
        **_EXTRA_FIELDS.get(rt.key, {}),
    }
    checks: list[tuple[tuple[str, ...], bool, str]] = []
    for part in _split(text):
        found = _EQ_RE.match(part)
        if not found:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        name, op, value = found.groups()
        if name not in supported:
            raise bad_request(f"field label not supported: {name}")
        checks.append((supported[name], op != "!=", value))

    def matches(obj: dict[str, Any]) -> bool:
        return all((_lookup(obj, path) == value) == equal for path, equal, value in checks)

    return matches


def combine(*predicates: Predicate | None) -> Predicate | None:
    active = [p for p in predicates if p is not None]
    if not active:
        return None
    if len(active) == 1:
        return active[0]
    return lambda obj: all(p(obj) for p in active)
