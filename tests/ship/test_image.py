"""The operator image, built from the Dockerfile and looked into: what a cluster's nodes would run.

``hack/image/build.sh`` builds it with podman (``--isolation chroot``: no daemon, no registry),
once per content. The tests read the image's config, mount its filesystem with ``podman image
mount`` and run the ``agentpool`` command inside it with ``chroot`` as the image's user, as a
container runtime would, without one. Both need root, and skip with the reason where they cannot
run; where podman is missing, the script installs it from Debian's packages.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster import wait_for
from docblocks import block_for
from ship.scenario import free_port

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "agentpool"
BUILD = ROOT / "hack" / "image" / "build.sh"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
VALUES = yaml.safe_load((ROOT / "charts" / "agentpool" / "values.yaml").read_text())
USER = f"{VALUES['securityContext']['runAsUser']}:{VALUES['podSecurityContext']['runAsUser']}"
SITE_PACKAGES = Path("opt/venv/lib/python3.11/site-packages")

#: The image's size as podman reports it (uncompressed), at most. Now about 380 MB on the base
#: made from Debian's packages: the base is about 155 MB, the operator's virtualenv about 225 MB,
#: of which the kubernetes client alone is about 125 MB.
SIZE_BUDGET_MB = 450

#: A cold build makes the base and downloads every dependency: minutes, not seconds.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def _data_files() -> set[str]:
    """The package's files that are not Python modules: what package-data must carry."""
    return {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in {".py", ".pyc"}
    }


@pytest.fixture(scope="session")
def image() -> str:
    """The image's reference, built by hack/image/build.sh (or found in its cache)."""
    if os.geteuid() != 0:
        pytest.skip(
            "needs root: podman builds with --isolation chroot and the tests chroot into the "
            "mounted image"
        )
    result = subprocess.run(
        ["bash", str(BUILD)], capture_output=True, text=True, timeout=1700, check=False
    )
    if result.returncode == 3:
        pytest.skip(result.stderr.strip().splitlines()[-1])
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def inspected(image: str) -> dict[str, Any]:
    """``podman image inspect`` of the image."""
    out = subprocess.run(
        ["podman", "image", "inspect", image], capture_output=True, text=True, check=True
    ).stdout
    found: dict[str, Any] = json.loads(out)[0]
    return found


@pytest.fixture(scope="session")
def rootfs(image: str) -> Iterator[Path]:
    """The image's filesystem, mounted read-only for the session."""
    mounted = subprocess.run(
        ["podman", "image", "mount", image], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        yield Path(mounted)
    finally:
        subprocess.run(["podman", "image", "unmount", image], capture_output=True, check=False)


def _run_as_image_user(
    rootfs: Path, inspected: dict[str, Any], *argv: str
) -> subprocess.CompletedProcess[str]:
    """Runs ARGV in the image as its config says a runtime would: as its user, with its
    environment only, in its working directory."""
    config = inspected["Config"]
    if shutil.which("chroot") is None:
        pytest.skip("chroot(8) is not installed")
    return subprocess.run(
        [
            "chroot",
            f"--userspec={config['User']}",
            str(rootfs),
            "/usr/bin/env",
            "-i",
            *config["Env"],
            "/bin/sh",
            "-c",
            'cd "$0" && exec "$@"',
            config["WorkingDir"],
            *argv,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_config_runs_agentpool_as_the_charts_user_on_the_charts_ports(
    inspected: dict[str, Any],
) -> None:
    """The user the chart's securityContext names, `agentpool run` as the command, and the
    liveness and metrics ports the chart probes and scrapes."""
    config = inspected["Config"]
    assert config["User"] == USER == "10001:10001"
    assert config["Entrypoint"] == ["agentpool"]
    assert config["Cmd"] == ["run"]
    ports = {VALUES["healthPort"], VALUES["metrics"]["port"]}
    assert ports == {8080, 9090}
    assert set(config["ExposedPorts"]) == {f"{port}/tcp" for port in ports}
    assert config["WorkingDir"] == "/opt/agentpool"


def test_agentpool_version_runs_inside_the_image_as_its_user(
    rootfs: Path, inspected: dict[str, Any]
) -> None:
    """The image's entrypoint with --version, run in the image as uid 10001."""
    entrypoint = inspected["Config"]["Entrypoint"]
    result = _run_as_image_user(rootfs, inspected, *entrypoint, "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"agentpool {VERSION}"
    whoami = _run_as_image_user(rootfs, inspected, "python3", "-c", "import os; print(os.getuid())")
    assert whoami.stdout.strip() == "10001", whoami.stderr


def _files(top: Path) -> set[str]:
    return {
        p.relative_to(top).as_posix()
        for p in top.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def test_the_image_holds_the_package_of_the_tree_and_the_examples(rootfs: Path) -> None:
    """The installed package is the tree's, module for module and byte for byte (a build that
    reused a stale layer would fail here), and the example agents are at /opt/agentpool/examples
    as the repository has them."""
    installed = rootfs / SITE_PACKAGES / "agentpool"
    modules = {name for name in _files(PACKAGE) if name.endswith(".py")}
    assert modules - _files(installed) == set()
    stale = sorted(
        name for name in modules if (installed / name).read_bytes() != (PACKAGE / name).read_bytes()
    )
    assert stale == [], f"the image's package is not the tree's: {stale[:10]}"
    examples = rootfs / "opt" / "agentpool" / "examples"
    assert _files(ROOT / "examples")
    assert _files(examples) == _files(ROOT / "examples")


def test_the_image_holds_no_tests_git_history_or_virtualenv_of_the_repository(
    rootfs: Path,
) -> None:
    """Only what .dockerignore keeps reaches the image: no tests, no .git, no .venv anywhere, and
    the builder's sources stay in the builder."""
    assert not (rootfs / "src").exists()
    assert sorted(p.name for p in (rootfs / "opt" / "agentpool").iterdir()) == ["examples"]
    ours = [rootfs / "opt" / "agentpool", rootfs / SITE_PACKAGES / "agentpool"]
    assert [p for top in ours for p in top.rglob("*") if p.name in {"tests", "conftest.py"}] == []
    stray = [
        Path(parent, name)
        for parent, dirs, _ in os.walk(rootfs)
        for name in dirs
        if name in {".git", ".venv"}
    ]
    assert stray == []


def test_the_build_secrets_stay_out_of_the_image(
    rootfs: Path, inspected: dict[str, Any], image: str
) -> None:
    """The machine's pip settings reach the build as secrets: neither the image's environment,
    its files nor its history keep them."""
    env = dict(item.split("=", 1) for item in inspected["Config"]["Env"])
    assert {name for name in env if name.startswith("PIP_")} == {"PIP_DISABLE_PIP_VERSION_CHECK"}
    assert not (rootfs / "etc" / "pip.conf").exists()
    secrets = rootfs / "run" / "secrets"
    assert not secrets.exists() or list(secrets.iterdir()) == []
    history = subprocess.run(
        ["podman", "history", "--no-trunc", "--format", "{{.CreatedBy}}", image],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    machine = os.environ.get("PIP_INDEX_URL") or os.environ.get("PIP_CERT")
    if machine:
        assert machine not in history
    assert "index-url" not in history


def test_the_image_is_within_its_size_budget(
    inspected: dict[str, Any],
    image: str,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The image's size, reported on the terminal, and at most SIZE_BUDGET_MB."""
    size_mb = inspected["Size"] / 1e6
    line = f"{image}: {size_mb:.0f} MB (budget {SIZE_BUDGET_MB} MB)"
    with capsys.disabled():
        print(f"\nimage size: {line}")
    request.node.user_properties.append(("image_size_mb", round(size_mb)))
    assert size_mb <= SIZE_BUDGET_MB, line


def test_the_image_carries_every_data_file_the_operator_reads(
    rootfs: Path, inspected: dict[str, Any]
) -> None:
    """Every file of the package that is not a module (kinds.yaml, protobuf.yaml, py.typed) is in
    the image's package, byte for byte, and the tables the operator loads at start load there.

    The Dockerfile's wheel carries only what pyproject's package-data names: a table missing from
    it works from a checkout and fails in the image."""
    installed = rootfs / SITE_PACKAGES / "agentpool"
    data = _data_files()
    assert "api/kinds.yaml" in data
    missing = sorted(name for name in data if not (installed / name).is_file())
    assert missing == [], (
        f"the image's agentpool lacks {missing}: add them to [tool.setuptools.package-data] "
        "in pyproject.toml"
    )
    differing = sorted(
        name for name in data if (installed / name).read_bytes() != (PACKAGE / name).read_bytes()
    )
    assert differing == []
    load = (
        "import agentpool.handlers.operator\n"
        "from agentpool.api.crds import render_crds\n"
        "from agentpool.local.apiserver.endpoints import protobuf\n"
        "print(len(render_crds()))\n"
    )
    result = _run_as_image_user(rootfs, inspected, "python3", "-c", load)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) == len(list((ROOT / "crds").glob("*.yaml")))


def _image_id(reference: str) -> str:
    return subprocess.run(
        ["podman", "image", "inspect", "--format", "{{.Id}}", reference],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_the_build_is_cached_by_content(image: str) -> None:
    """A second run on the same sources builds nothing and prints the same reference, and the
    version's tag, which a build of other sources may have moved since, names it again."""
    assert re.fullmatch(rf"localhost/agentpool:{re.escape(VERSION)}-[0-9a-f]{{12}}", image)

    def build() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(BUILD)], capture_output=True, text=True, timeout=300, check=True
        )

    result = build()
    assert result.stdout.strip().splitlines()[-1] == image
    cached = re.search(r"cached \(base (\S+)\)", result.stderr)
    assert cached, result.stderr
    version_tag = f"localhost/agentpool:{VERSION}"
    subprocess.run(["podman", "tag", cached[1], version_tag], capture_output=True, check=True)
    assert _image_id(version_tag) != _image_id(image)
    result = build()
    assert result.stdout.strip().splitlines()[-1] == image
    assert _image_id(version_tag) == _image_id(image)


GUIDE_AGENT = """
from agentpool.agent import Agent


def handle(item, input, context):
    return {"answer": item["text"].upper()}


agent = Agent(handle)
"""


def test_the_package_guides_dockerfile_serves_an_agent(image: str, tmp_path: Path) -> None:
    """The three-line Dockerfile of the packaging guide, FROM this image, builds an image whose
    entrypoint, run as the image's user, serves the agent file it copied: ready on /healthz,
    answering an item with the token."""
    block = block_for(
        "tests/ship/test_image.py::test_the_package_guides_dockerfile_serves_an_agent",
        ROOT / "docs" / "guides" / "package-an-agent.md",
    )
    lines = block.text.strip().splitlines()
    assert len(lines) == 3, block.text
    assert lines[0] == f"FROM agentpool:{VERSION}", block.text
    (tmp_path / "Dockerfile").write_text("\n".join([f"FROM {image}", *lines[1:]]) + "\n")
    (tmp_path / "my_agent.py").write_text(GUIDE_AGENT)
    reference = f"localhost/agentpool-guide-agent:{tmp_path.name.lower()}"
    subprocess.run(
        ["podman", "build", "--isolation", "chroot", "--pull=never", "-t", reference, "."],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    try:
        _serve_and_call(reference, tmp_path / "agent.log")
    finally:
        subprocess.run(["podman", "rmi", "-f", reference], capture_output=True, check=False)


def _serve_and_call(reference: str, log: Path) -> None:
    inspected = json.loads(
        subprocess.run(
            ["podman", "image", "inspect", reference], capture_output=True, text=True, check=True
        ).stdout
    )[0]
    config = inspected["Config"]
    rootfs = subprocess.run(
        ["podman", "image", "mount", reference], capture_output=True, text=True, check=True
    ).stdout.strip()
    port = free_port()
    env = [*config["Env"], "AGENT_HOST=127.0.0.1", f"AGENT_PORT={port}", "AGENTPOOL_TOKEN=secret"]
    with log.open("w") as written:
        process = _start_in(rootfs, config, env, written)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: _answers(f"{base}/healthz"), 60, message=f"the agent ready (log: {log})")
        request = urllib.request.Request(
            f"{base}/invoke",
            json.dumps({"id": "1", "item": {"text": "hi"}}).encode(),
            {"Content-Type": "application/json", "Authorization": "Bearer secret"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert json.loads(answer.read())["output"] == {"answer": "HI"}
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)
        subprocess.run(["podman", "image", "unmount", reference], capture_output=True, check=False)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def _start_in(
    rootfs: str, config: dict[str, Any], env: list[str], log: Any
) -> subprocess.Popen[str]:
    """The image's entrypoint in its mounted filesystem, as its user, in a session of its own."""
    return subprocess.Popen(
        [
            "chroot",
            f"--userspec={config['User']}",
            rootfs,
            "/usr/bin/env",
            "-i",
            *env,
            "/bin/sh",
            "-c",
            'cd "$0" && exec "$@"',
            config["WorkingDir"],
            *config["Entrypoint"],
        ],
        stdout=log,
        stderr=log,
        text=True,
        start_new_session=True,
    )


def test_the_stand_in_base_is_made_on_a_machine_that_never_made_it(tmp_path: Path) -> None:
    """On a machine whose podman storage and cache are empty, the build's base step makes the
    stand-in base from Debian's packages, stores it, prints its reference, and leaves no
    temporary folder behind: what a fresh machine's first build goes through. A second run finds
    it and makes nothing."""
    if os.geteuid() != 0:
        pytest.skip("needs root: mmdebstrap and podman's storage")
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (hack/image/build.sh installs it on its first run)")
    storage = tmp_path / "storage"
    conf = tmp_path / "storage.conf"
    # A storage of its own, so the base this test makes is not the machine's.
    conf.write_text(
        f'[storage]\ndriver = "vfs"\ngraphroot = "{storage / "graph"}"\n'
        f'runroot = "{storage / "run"}"\n'
    )
    env = {**os.environ, "CONTAINERS_STORAGE_CONF": str(conf), "AGENTPOOL_CACHE": str(tmp_path)}
    listed = subprocess.run(
        ["podman", "images", "--quiet"], env=env, capture_output=True, text=True, check=True
    )
    assert listed.stdout.strip() == ""

    def make_base() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(BUILD), "--standin-base"],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )

    try:
        made = make_base()
        if made.returncode != 0 and "cannot be installed here" in made.stderr:
            pytest.skip(made.stderr.strip().splitlines()[-1])
        assert made.returncode == 0, made.stderr[-4000:]
        assert "made the base" in made.stderr
        base = made.stdout.strip().splitlines()[-1]
        assert base.startswith("localhost/agentpool-base:")
        exists = subprocess.run(["podman", "image", "exists", base], env=env, check=False)
        assert exists.returncode == 0, f"{base} is not in the test's storage"
        assert not list((tmp_path / "image").glob("base.*")), "the base's folder was left"
        again = make_base()
        assert again.returncode == 0, again.stderr[-4000:]
        assert again.stdout.strip().splitlines()[-1] == base
        assert "made the base" not in again.stderr
    finally:
        # Only this storage's images, then its folder: `podman system reset` would also take
        # the machine's networks and podman's shared run folder, which the storage does not
        # confine.
        subprocess.run(["podman", "rmi", "--all", "--force"], env=env, capture_output=True)
        shutil.rmtree(storage, ignore_errors=True)
