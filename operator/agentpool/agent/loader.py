"""Finding the agent to run from a ``MODULE:OBJECT`` target.

``python -m agentpool.agent`` calls ``load_agent``. MODULE is a dotted module name importable from
the working directory, or a path to a ``.py`` file (relative to the working directory or
absolute), so ``python -m agentpool.agent examples/agents/echo.py:agent`` works from a checkout and
the same relative path from the image's working directory (or an absolute one). OBJECT defaults
to ``agent``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from agentpool.agent.agents import Agent

DEFAULT_OBJECT = "agent"


class LoadError(Exception):
    """The target names no agent; the message says what was looked for and where."""


def load_agent(target: str) -> Agent:
    """The ``Agent`` that ``target`` (``MODULE:OBJECT``, ``path.py:OBJECT`` or ``MODULE``) names."""
    module_name, colon, object_path = target.rpartition(":")
    if not colon:
        module_name, object_path = target, DEFAULT_OBJECT
    if not module_name or not object_path:
        raise LoadError(f"{target!r} is not MODULE:OBJECT")
    if module_name.endswith(".py") or "/" in module_name or "\\" in module_name:
        module = _load_file(Path(module_name))
    else:
        module = _import(module_name)
    found: object = module
    for part in object_path.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise LoadError(f"{module_name} has no {object_path!r}") from None
    if not isinstance(found, Agent):
        raise LoadError(
            f"{module_name}:{object_path} is a {type(found).__name__}, not an agentpool.agent.Agent"
        )
    return found


def _import(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        # Only the target itself missing is ours to explain; a missing dependency of a module
        # that exists is the author's error and keeps its own traceback.
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise LoadError(f"no module named {name!r} (searched from {Path.cwd()})") from None
        raise


def _load_file(path: Path) -> ModuleType:
    path = path.expanduser().resolve()
    if not path.is_file():
        raise LoadError(f"no such file: {path}")
    name = path.stem if path.stem not in sys.modules else f"_agentpool_agent_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise LoadError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    # As when running a script: the file's own folder comes first, so it can import its siblings.
    sys.path.insert(0, str(path.parent))
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
