"""Resolve the simple JSONPath of a CRD printer column against an object, for the column tests.

A printer column says where its cell comes from (``.status.readyReplicas``,
``.status.conditions[?(@.type=="Ready")].status``). The column tests resolve each column of the
generated CRDs with this against objects built from the models, to prove every column finds its
value. Supported: ``.name``, ``['name']``, ``[n]``, ``[*]`` and equality filters
``[?(@.key=="value")]``. (The local API server fills its Table rows with a reader of its own, in
``agentpool.local.apiserver.endpoints.table``.)
"""

from __future__ import annotations

import re
from typing import Any

_STEP = re.compile(
    r"""\.(?P<name>[A-Za-z0-9_\-]+)
      | \[\s*'(?P<quoted>[^']*)'\s*\]
      | \[\s*(?P<index>-?\d+)\s*\]
      | \[\s*\*\s*\]
      | \[\s*\?\(\s*@\.(?P<key>[A-Za-z0-9_\-]+)\s*==\s*(?P<lit>"[^"]*"|'[^']*'|-?\d+)\s*\)\s*\]""",
    re.VERBOSE,
)


class JsonPathError(ValueError):
    """A path this resolver cannot read."""


def _steps(path: str) -> list[re.Match[str]]:
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    text = text.removeprefix("$")
    steps, position = [], 0
    while position < len(text):
        match = _STEP.match(text, position)
        if match is None:
            raise JsonPathError(f"cannot read {path!r} at {text[position:]!r}")
        steps.append(match)
        position = match.end()
    return steps


def _literal(text: str) -> Any:
    return text[1:-1] if text[0] in "\"'" else int(text)


def resolve(obj: Any, path: str) -> list[Any]:
    """Every value ``path`` selects in ``obj``, in document order (empty when none)."""
    current = [obj]
    for step in _steps(path):
        found: list[Any] = []
        for value in current:
            name = step["name"] if step["name"] is not None else step["quoted"]
            if name is not None:
                if isinstance(value, dict) and name in value:
                    found.append(value[name])
            elif step["index"] is not None:
                index = int(step["index"])
                if isinstance(value, list) and -len(value) <= index < len(value):
                    found.append(value[index])
            elif step["key"] is not None:
                wanted = _literal(step["lit"])
                if isinstance(value, list):
                    found.extend(
                        item
                        for item in value
                        if isinstance(item, dict) and item.get(step["key"]) == wanted
                    )
            elif isinstance(value, list):
                found.extend(value)
            elif isinstance(value, dict):
                found.extend(value.values())
        current = found
    return current


def first(obj: Any, path: str) -> Any:
    """The first value ``path`` selects, or None: what a printer column's cell shows."""
    values = resolve(obj, path)
    return values[0] if values else None
