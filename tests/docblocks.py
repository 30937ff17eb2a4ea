"""The command blocks of the README and the manual's guides, and who runs each.

Every ``sh``, ``bash``, ``console`` or ``python`` block there carries, on the line before its
fence, a marker that says what runs it:

- ``<!-- test: tests/PATH.py::test_name -->``: that test takes the block by its marker
  (:func:`block_for`) and runs it as printed, so the page cannot drift from what works;
- ``<!-- ci: why -->``: CI runs what the block does (say, the image build in ``.ci/run``) and the
  marker says where.

``tests/ship/test_docs.py`` fails on an unmarked block and on a marker naming a test that does
not exist or does not read it.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
#: The pages whose commands a reader copies: the front door and the manual's guides.
PAGES: tuple[Path, ...] = (REPO / "README.md", *sorted((REPO / "docs" / "guides").glob("*.md")))
#: The languages of blocks a reader runs; YAML and JSON blocks are data, not commands.
COMMAND_LANGUAGES = frozenset({"sh", "bash", "console", "shell", "python", "py"})

_FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*(?P<kind>test|ci):\s*(?P<what>.+?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it starts (1-based line of the fence), its language, its text
    without the fence or the list indentation, and its marker, if any."""

    path: Path
    line: int
    language: str
    text: str
    marker: tuple[str, str] | None

    @property
    def is_command(self) -> bool:
        return self.language in COMMAND_LANGUAGES

    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """Every fenced block of the Markdown file, in order."""
    return parse_blocks(path.read_text(), path)


def parse_blocks(text: str, path: Path) -> list[Block]:
    """Every fenced block of ``text`` (the Markdown of ``path``), in order."""
    lines = text.splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent = len(opening["indent"])
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        body = [
            line[indent:] if line[:indent].strip() == "" else line
            for line in lines[index + 1 : end]
        ]
        marker = None
        if index > 0 and (match := _MARKER.match(lines[index - 1])):
            marker = (match["kind"], match["what"])
        found.append(
            Block(
                path=path,
                line=index + 1,
                language=opening["lang"],
                text="\n".join(body) + "\n",
                marker=marker,
            )
        )
        index = end + 1
    return found


def block_for(test_id: str, path: Path) -> Block:
    """The one block of ``path`` whose marker names the test ``test_id``
    (``tests/PATH.py::test_name``)."""
    named = [block for block in blocks(path) if block.marker == ("test", test_id)]
    if len(named) != 1:
        raise LookupError(
            f"{path.relative_to(REPO)} has {len(named)} blocks marked <!-- test: {test_id} -->; "
            "a test reads exactly one"
        )
    return named[0]


def namespaced_kubeconfig(
    kubeconfig: Path, context: str | None, namespace: str, path: Path
) -> Path:
    """A copy of ``kubeconfig`` at ``path`` whose current context (``context``, or its own) has
    ``namespace`` set: the cluster as a reader's ``kubectl`` sees it when they run a block."""
    config = yaml.safe_load(kubeconfig.read_text())
    name = context or config["current-context"]
    config["current-context"] = name
    for entry in config["contexts"]:
        if entry["name"] == name:
            entry["context"]["namespace"] = namespace
    path.write_text(yaml.safe_dump(config))
    return path


def run_shell_block(
    block: Block, *, kubeconfig: Path, bindir: Path, cwd: Path, timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run a shell block as printed (bash, stopping at the first failing command), with
    ``KUBECONFIG`` and the programs of ``bindir`` (kubectl, agentpool) first on ``PATH``."""
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.text],
        env={
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
        },
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
