"""The README and the manual: every command a reader copies is run, and the manual builds.

Each ``sh`` or ``python`` block of the README and of docs/guides says which test runs it or where
CI does (see ``tests/docblocks.py``); a new block without that fails here. The blocks this file
names run here; the others run in the tests their markers name. The YAML examples are checked
against the API models, and ``mkdocs build --strict`` checks every link and anchor.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentpool import cli
from agentpool.api import AgentLeaseSpec, AgentPoolSpec, PoolRunSpec
from cluster import wait_for
from docblocks import PAGES, REPO, Block, block_for, blocks, parse_blocks
from ship.scenario import free_port

GUIDES = REPO / "docs" / "guides"
SPECS: dict[str, Any] = {
    "AgentPool": AgentPoolSpec,
    "PoolRun": PoolRunSpec,
    "AgentLease": AgentLeaseSpec,
}


def command_blocks() -> list[Block]:
    return [block for page in PAGES for block in blocks(page) if block.is_command]


def test_every_command_block_says_what_runs_it() -> None:
    """A command block without a `<!-- test: ... -->` or `<!-- ci: ... -->` marker on the line
    before it fails, named by file and line, so no command reaches a reader untried."""
    unmarked = [block.where() for block in command_blocks() if block.marker is None]
    assert not unmarked, (
        f"command blocks nobody runs: {unmarked}; put `<!-- test: tests/PATH.py::test_name -->` "
        "(a test that reads the block with docblocks.block_for and runs it) or "
        "`<!-- ci: where CI runs it -->` on the line before each"
    )


def test_blocks_are_found_in_lists_and_outside() -> None:
    """The block reader finds an indented block in a list item and a marker before it, so a
    command tucked into a numbered step is held to the same rule."""
    page = REPO / "docs" / "index.md"
    text = (
        "1. Step:\n\n   <!-- ci: a reason -->\n   ```sh\n   echo hi\n   ```\n\n"
        "```python\nx = 1\n```\n"
    )
    found = parse_blocks(text, page)
    assert [(b.language, b.text, b.marker) for b in found] == [
        ("sh", "echo hi\n", ("ci", "a reason")),
        ("python", "x = 1\n", None),
    ]


@pytest.mark.parametrize(
    "block",
    [b for b in command_blocks() if b.marker and b.marker[0] == "test"],
    ids=Block.where,
)
def test_each_marked_test_exists_and_reads_its_block(block: Block) -> None:
    """The test a marker names is a function of that file, and the file takes this very block
    by its marker (so the marker is not a claim nobody checks)."""
    assert block.marker is not None
    test_id = block.marker[1]
    path, _, name = test_id.partition("::")
    source = REPO / path
    assert source.is_file(), f"{block.where()}: {path} does not exist"
    tree = ast.parse(source.read_text())
    functions = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    assert name in functions, f"{block.where()}: {path} has no function {name}"
    assert f'"{test_id}"' in source.read_text(), (
        f"{block.where()}: {path} never reads the block (block_for({test_id!r}, ...))"
    )
    assert block_for(test_id, block.path) == block


def yaml_objects() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for page in PAGES:
        for block in blocks(page):
            if block.language != "yaml":
                continue
            for document in yaml.safe_load_all(block.text):
                if isinstance(document, dict) and document.get("kind") in SPECS:
                    found.append((block.where(), document))
    return found


@pytest.mark.parametrize(("where", "document"), yaml_objects(), ids=[w for w, _ in yaml_objects()])
def test_yaml_examples_are_valid_objects(where: str, document: dict[str, Any]) -> None:
    """Each AgentPool, PoolRun or AgentLease a page shows is one the API accepts: its spec
    validates against the model the CRD is generated from."""
    assert document["apiVersion"] == "agentpool.dev/v1alpha1", where
    assert document["metadata"]["name"], where
    SPECS[document["kind"]].model_validate(document["spec"])


def test_the_sdk_example_serves_a_model(tmp_path: Path) -> None:
    """The agent guide's SDK example, saved as printed and served as the guide says (`python -m
    agentpool.agent path/to/file.py:agent`), loads its model (a table of character names) and
    reports ready, then answers an item from it."""
    block = block_for(
        "tests/ship/test_docs.py::test_the_sdk_example_serves_a_model",
        GUIDES / "write-an-agent.md",
    )
    module = tmp_path / "my_agent.py"
    module.write_text(block.text)
    port = free_port()
    env = {**os.environ, "AGENTPOOL_TOKEN": "secret", "AGENT_HOST": "127.0.0.1"}
    process = _start(
        [sys.executable, "-m", "agentpool.agent", f"{module}:agent"],
        cwd=tmp_path,
        env={**env, "AGENT_PORT": str(port)},
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: _healthy(f"{base}/healthz"), 60, message="the SDK example ready")
        status, answer = _post(f"{base}/invoke", {"id": "1", "item": {"text": "hi"}}, "secret")
        assert status == 200, answer
        assert answer["output"] == {"answer": ["LATIN SMALL LETTER H", "LATIN SMALL LETTER I"]}
    finally:
        _stop(process)


def _post(url: str, body: dict[str, Any], token: str | None) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, None


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def _start(argv: list[str], *, cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """Start an agent in a process group of its own, so that _stop ends all it started."""
    return subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )


def _stop(process: subprocess.Popen[str]) -> None:
    """End the process group the test started, by its id."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


def test_the_agent_guides_echo_agent_answers_as_printed() -> None:
    """The guide's command serves the echo agent: with its token an item comes back as the
    output, without it the agent answers 401. The port is a free one instead of 8080, which
    another program on a shared machine may hold."""
    block = block_for(
        "tests/ship/test_docs.py::test_the_agent_guides_echo_agent_answers_as_printed",
        GUIDES / "write-an-agent.md",
    )
    port = free_port()
    assert "AGENT_PORT=8080 " in block.text
    script = block.text.replace("AGENT_PORT=8080 ", f"AGENT_HOST=127.0.0.1 AGENT_PORT={port} ")
    bindir = str(Path(sys.executable).parent)
    process = _start(
        ["bash", "-c", script],
        cwd=REPO,
        env={**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"},
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: _healthy(f"{base}/healthz"), 60, message="the echo agent ready")
        item = {"text": "hi"}
        status, answer = _post(f"{base}/invoke", {"id": "1", "item": item}, "secret")
        assert (status, answer["output"]) == (200, item)
        assert _post(f"{base}/invoke", {"id": "2", "item": item}, None)[0] == 401
    finally:
        _stop(process)


@pytest.mark.slow
def test_the_local_guides_operator_serves_metrics_as_printed(tmp_path: Path) -> None:
    """The local cluster guide's commands, run by bash as printed (its directory and port made
    the test's own), start the cluster without an operator and the operator beside it, whose
    /metrics lists the operator's metric families, and whose log file fills."""
    for tool in ("kubectl", "curl"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed here")
    block = block_for(
        "tests/ship/test_docs.py::test_the_local_guides_operator_serves_metrics_as_printed",
        GUIDES / "local-cluster.md",
    )
    port = free_port()
    script = block.text.replace("/tmp/agentpool-local", str(tmp_path / "local"))
    script = script.replace("9090", str(port))
    bindir = str(Path(sys.executable).parent)
    out_path, err_path = tmp_path / "stdout", tmp_path / "stderr"
    # Files, not pipes: the processes the script leaves in the background hold its output open.
    with out_path.open("w") as out_file, err_path.open("w") as err_file:
        process = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=REPO,
            env={**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"},
            stdout=out_file,
            stderr=err_file,
            text=True,
            start_new_session=True,
        )
    try:
        # The script ends once curl has printed; the cluster and the operator it started in
        # the background go on until the test ends their process group.
        process.wait(timeout=240)
        out = out_path.read_text()
        assert process.returncode == 0, err_path.read_text()
        # Above curl's lines, `local up` printed how to point kubectl at the cluster.
        families = {line.split()[2] for line in out.splitlines() if line.startswith("# HELP ")}
        expected = {"agentpool_agents", "agentpool_waiters", "agentpool_api_writes_total"}
        assert expected <= families, out
        log = tmp_path / "local" / "operator.log"
        wait_for(lambda: log.stat().st_size > 0, 30, message="the operator's log written")
    finally:
        _stop(process)


def test_the_manual_builds_strict(tmp_path: Path) -> None:
    """`mkdocs build --strict` (the `docs` extra) builds every page of the nav with no warning:
    no broken link or anchor, no page left out."""
    if shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("mkdocs is not installed: pip install -e '.[docs]'")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    pages = {
        path.parent.relative_to(tmp_path / "site")
        for path in (tmp_path / "site").rglob("index.html")
    }
    assert Path("troubleshooting") in pages
    assert Path("reference/configuration") in pages


def _subcommands(
    parser: argparse.ArgumentParser, prefix: str
) -> dict[str, argparse.ArgumentParser]:
    """Every command of the parser by its full name (``agentpool local up``), nested ones too."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                nested = _subcommands(sub, f"{prefix} {name}")
                found.update(nested or {f"{prefix} {name}": sub})
    return found


def test_the_cli_reference_names_every_command_and_flag() -> None:
    """Each `agentpool` command has a `## agentpool ...` section of the command-line reference
    (or shares one, as watch and results do), and every long flag `--help` lists is named on
    the page (hidden, deprecated spellings aside), so a new flag fails here until it is
    documented."""
    page = (REPO / "docs" / "reference" / "cli.md").read_text()
    headings = re.findall(r"^## (agentpool [\w ]+)$", page, re.MULTILINE)
    commands = _subcommands(cli.build_parser(), "agentpool")
    for command, parser in commands.items():
        assert any(command in heading for heading in headings), f"no section for {command}"
        for action in parser._actions:
            if action.help == argparse.SUPPRESS:
                continue
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help":
                    assert f"`{flag}" in page, f"{command} {flag} is not in docs/reference/cli.md"
