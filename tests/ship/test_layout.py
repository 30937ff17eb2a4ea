"""The package stays readable as it grows: no runaway module, no handler past 50 lines, no two
errors of one name.

Where code goes is decided by what belongs together, in review (DEVELOPMENT.md says where each
kind of code lives); the module bound only catches one that has stopped being one idea, well
past the 540 to 670 lines kopf keeps its cohesive modules at. A handler past 50 lines is
deciding something that belongs in a pure core, where a table test can reach it.
"""

from __future__ import annotations

import ast
import builtins
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "agentpool"
MODULE_LINES = 800
HANDLER_LINES = 50


def test_no_module_runs_away() -> None:
    long = {
        str(path.relative_to(PACKAGE)): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > MODULE_LINES
    }
    assert long == {}


def test_no_function_in_the_handlers_is_longer_than_fifty_lines() -> None:
    long = {}
    for path in sorted((PACKAGE / "handlers").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > HANDLER_LINES:
                    long[f"{path.name}:{node.name}"] = lines
    assert long == {}


def test_events_are_posted_through_io_alone() -> None:
    """``io/`` is the operator's only edge: Events too go through ``io/events.py``."""
    posting = {"event", "info", "warn", "exception"}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent.name == "io":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in posting
                and isinstance(node.value, ast.Name)
                and node.value.id == "kopf"
            ):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert found == []


def test_no_two_errors_share_a_name() -> None:
    """An error's name means one thing across the package (one word per idea): a user who reads
    ``PoolExhausted`` or ``NotFound`` in a traceback, or a developer who catches it, cannot
    mistake one package's for another's."""
    bases: dict[tuple[str, str], list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                named = [
                    b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
                ]
                bases[(node.name, str(path.relative_to(PACKAGE)))] = named
    errors = {
        name
        for name in dir(builtins)
        if isinstance(getattr(builtins, name), type)
        and issubclass(getattr(builtins, name), BaseException)
    }
    grown = True
    while grown:
        found = {name for (name, _), named in bases.items() if set(named) & errors}
        grown = not found <= errors
        errors |= found
    where: defaultdict[str, list[str]] = defaultdict(list)
    for name, module in bases:
        if name in errors:
            where[name].append(module)
    assert {name: modules for name, modules in where.items() if len(modules) > 1} == {}
