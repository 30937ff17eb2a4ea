"""Evaluate ``x-kubernetes-validations`` CEL rules the way the Kubernetes API server does.

The local API server validates custom resources with their CRD's rules, and the tests prove the
committed CRDs reject what they should; both call ``validation``, which calls this.
Compiled programs are cached by rule text: a CRD has a handful of rules and every write runs them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

_OLD_SELF = re.compile(r"\boldSelf\b")


@dataclass(frozen=True)
class CelOutcome:
    """Whether a rule held; ``error`` says why it could not be evaluated, if it could not."""

    passed: bool
    error: str | None = None


@lru_cache(maxsize=1)
def _environment() -> celpy.Environment:
    return celpy.Environment()


@lru_cache(maxsize=512)
def compile_rule(expression: str) -> Any:
    """The compiled CEL program of ``expression``; raises CELParseError if it does not parse."""
    environment = _environment()
    return environment.program(environment.compile(expression))


def is_transition_rule(rule: str) -> bool:
    """A rule that compares with ``oldSelf`` runs only on updates, when there is an old value."""
    return _OLD_SELF.search(rule) is not None


def _activation(value: Any, old: Any, has_old: bool) -> dict[str, Any]:
    activation = {"self": json_to_cel(value)}
    if has_old:
        activation["oldSelf"] = json_to_cel(old)
    return activation


def _reason(error: Exception) -> str:
    """What went wrong in an evaluation, in the words of its cause where cel-python keeps one
    (``('return error for overflow', ValueError, ("Unparsable timezone: 'X'",))``): the value at
    fault is named, as a real API server's error names it."""
    args = error.args
    if len(args) >= 3 and isinstance(args[2], tuple) and args[2] and isinstance(args[2][0], str):
        return args[2][0]
    return str(args[0] if args else error)


def evaluate_rule(rule: str, value: Any, *, old: Any = None, has_old: bool = False) -> CelOutcome:
    """Evaluate ``rule`` with ``self`` bound to ``value`` (and ``oldSelf`` to ``old`` if given)."""
    try:
        result = compile_rule(rule).evaluate(_activation(value, old, has_old))
    except (CELEvalError, CELParseError) as exc:
        return CelOutcome(passed=False, error=_reason(exc))
    if isinstance(result, CELEvalError):
        return CelOutcome(passed=False, error=_reason(result))
    if not isinstance(result, celtypes.BoolType):
        return CelOutcome(passed=False, error=f"rule gave {type(result).__name__}, not a bool")
    return CelOutcome(passed=bool(result))


def evaluate_message(
    expression: str, value: Any, *, old: Any = None, has_old: bool = False
) -> str | None:
    """The string a ``messageExpression`` yields, or None if it does not yield one."""
    try:
        result = compile_rule(expression).evaluate(_activation(value, old, has_old))
    except (CELEvalError, CELParseError):
        return None
    return str(result) if isinstance(result, str) else None


_FIELD_CHAIN = re.compile(r"\b(?:self|oldSelf)((?:\s*\.\s*[A-Za-z_][A-Za-z0-9_]*)+)")
_ROOT_FIELDS = {"apiVersion": {"type": "string"}, "kind": {"type": "string"}}
_ROOT_METADATA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "generateName": {"type": "string"}},
}


def _typed(node: dict[str, Any]) -> bool:
    """Whether CEL sees a field with this schema: the API server leaves out a field with no
    type (bar int-or-string), and a list or map whose elements it cannot see."""
    if node.get("x-kubernetes-int-or-string"):
        return True
    kind = node.get("type")
    if kind == "array":
        items = node.get("items")
        return isinstance(items, dict) and _typed(items)
    return bool(kind)


def undeclared_fields(node: dict[str, Any], expression: str, *, root: bool) -> list[str]:
    """The fields that ``expression`` selects on ``self`` that CEL cannot see in ``node``, so
    that a real API server refuses the rule at compile time ("undefined field").

    ``root`` says node is a resource's root, where apiVersion, kind, metadata.name and
    metadata.generateName are always visible. Method calls (``self.x.size()``) end a chain.
    """
    undefined: list[str] = []
    for match in _FIELD_CHAIN.finditer(expression):
        names = [part.strip() for part in match.group(1).split(".") if part.strip()]
        rest = expression[match.end() :].lstrip()
        if rest.startswith("("):
            names = names[:-1]
        current: dict[str, Any] | None = node
        at_root = root
        for name in names:
            if current is None:
                break
            properties = dict(current.get("properties") or {})
            if at_root:
                properties = {**_ROOT_FIELDS, **properties, "metadata": _ROOT_METADATA}
            additional = current.get("additionalProperties")
            if name in properties and _typed(properties[name]):
                current = properties[name]
            elif isinstance(additional, dict) and _typed(additional):
                current = additional
            else:
                undefined.append(name)
                break
            at_root = False
            if current.get("type") != "object":
                current = None
    return undefined
