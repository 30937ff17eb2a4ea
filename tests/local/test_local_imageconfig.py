"""How the local kubelet merges an image's config with a pod's: argv, env, workdir, user."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentpool.local.kubelet import images
from agentpool.local.kubelet.imageconfig import (
    ImageConfig,
    UserError,
    merge_image_config,
    parse_user,
)

IMAGE = ImageConfig(
    entrypoint=("agentpool",),
    cmd=("run",),
    env=("PATH=/opt/venv/bin:/usr/bin:/bin", "PYTHONUNBUFFERED=1", "MODE=image"),
    working_dir="/opt/agentpool",
    user="10001:10001",
)
PASSWD = "root:x:0:0:root:/root:/bin/bash\nagentpool:x:10001:10001::/nonexistent:/bin/false\n"
GROUP = "root:x:0:\nagentpool:x:10001:\nextra:x:2000:\n"


@pytest.mark.parametrize(
    ("container", "argv"),
    [
        ({}, ["agentpool", "run"]),
        ({"args": ["--version"]}, ["agentpool", "--version"]),
        ({"command": ["python", "-m", "x"]}, ["python", "-m", "x"]),
        ({"command": ["python"], "args": ["-c", "1"]}, ["python", "-c", "1"]),
        (
            {"command": ["echo", "$(MODE)", "$(POD_IP)", "$$(POD_IP)"]},
            ["echo", "pod", "10.0.0.1", "$(POD_IP)"],
        ),
        ({"args": ["$(MODE)"]}, ["agentpool", "pod"]),
    ],
)
def test_command_overrides_the_entrypoint_and_args_the_cmd(
    container: dict[str, Any], argv: list[str]
) -> None:
    launch = merge_image_config(
        IMAGE, container, pod_env={"MODE": "pod", "POD_IP": "10.0.0.1"}, passwd=PASSWD
    )
    assert launch.argv == argv


def test_entrypoint_and_cmd_are_taken_as_written_without_expansion() -> None:
    config = ImageConfig(entrypoint=("sh", "-c"), cmd=("echo $(MODE)",))
    assert merge_image_config(config, {}, pod_env={"MODE": "x"}).argv == [
        "sh",
        "-c",
        "echo $(MODE)",
    ]


def test_env_is_the_images_then_the_pods() -> None:
    launch = merge_image_config(IMAGE, {}, pod_env={"MODE": "pod", "POD_IP": "10.0.0.1"})
    assert launch.env == {
        "PATH": "/opt/venv/bin:/usr/bin:/bin",
        "PYTHONUNBUFFERED": "1",
        "MODE": "pod",
        "POD_IP": "10.0.0.1",
    }


@pytest.mark.parametrize(
    ("config", "container", "workdir"),
    [
        (IMAGE, {}, "/opt/agentpool"),
        (IMAGE, {"workingDir": "/tmp"}, "/tmp"),
        (ImageConfig(), {}, "/"),
    ],
)
def test_working_dir(config: ImageConfig, container: dict[str, Any], workdir: str) -> None:
    assert merge_image_config(config, container, pod_env={}).workdir == workdir


@pytest.mark.parametrize(
    ("user", "pod_spec", "container", "ids"),
    [
        ("10001:10001", {}, {}, (10001, 10001)),
        ("", {}, {}, (0, 0)),
        ("agentpool", {}, {}, (10001, 10001)),
        ("10001", {}, {}, (10001, 10001)),
        ("4242", {}, {}, (4242, 0)),
        ("agentpool:extra", {}, {}, (10001, 2000)),
        ("10001:10001", {"securityContext": {"runAsUser": 2000}}, {}, (2000, 0)),
        ("10001:10001", {"securityContext": {"runAsUser": 0, "runAsGroup": 5}}, {}, (0, 5)),
        (
            "10001:10001",
            {"securityContext": {"runAsUser": 7, "runAsGroup": 7}},
            {"securityContext": {"runAsUser": 8}},
            (8, 7),
        ),
        ("10001:10001", {}, {"securityContext": {"runAsGroup": 3}}, (10001, 3)),
    ],
)
def test_run_as_user_and_group_over_the_images_user(
    user: str, pod_spec: dict[str, Any], container: dict[str, Any], ids: tuple[int, int]
) -> None:
    config = ImageConfig(user=user, cmd=("true",))
    launch = merge_image_config(
        config, container, pod_env={}, pod_spec=pod_spec, passwd=PASSWD, group=GROUP
    )
    assert (launch.uid, launch.gid) == ids


@pytest.mark.parametrize("user", ["nobody", "agentpool:nogroup"])
def test_an_unknown_user_or_group_is_an_error(user: str) -> None:
    with pytest.raises(UserError):
        parse_user(user, passwd=PASSWD, group=GROUP)


def test_parse_keeps_what_podman_inspect_reports() -> None:
    config = ImageConfig.parse(
        {
            "User": "10001:10001",
            "Env": ["PATH=/bin", "EMPTY"],
            "Entrypoint": ["agentpool"],
            "Cmd": ["run"],
            "WorkingDir": "/opt/agentpool",
        }
    )
    assert config == ImageConfig(
        ("agentpool",), ("run",), ("PATH=/bin", "EMPTY"), "/opt/agentpool", "10001:10001"
    )
    assert ImageConfig.parse(None) == ImageConfig()


@pytest.mark.parametrize(
    ("reference", "names"),
    [
        ("agentpool:0.1.0", ["agentpool:0.1.0", "localhost/agentpool:0.1.0"]),
        ("library/python:3", ["library/python:3", "localhost/library/python:3"]),
        ("localhost/agentpool:0.1.0", ["localhost/agentpool:0.1.0"]),
        ("ghcr.io/org/agentpool:1", ["ghcr.io/org/agentpool:1"]),
        ("registry:5000/agentpool", ["registry:5000/agentpool"]),
    ],
)
def test_short_names_are_looked_up_under_localhost(reference: str, names: list[str]) -> None:
    assert images.candidates(reference) == names


def test_display_name_prefers_the_tag_the_pod_names() -> None:
    tags = ["localhost/agentpool:0.1.0-abc", "localhost/agentpool:0.1.0"]
    assert images.display_name("agentpool:0.1.0", tags) == "localhost/agentpool:0.1.0"
    assert images.display_name("other:1", tags) == "other:1"


def test_images_are_opt_in() -> None:
    assert not images.images_enabled(None, {})
    assert images.images_enabled(None, {images.IMAGES_ENV: "1"})
    assert not images.images_enabled(False, {images.IMAGES_ENV: "1"})
    assert images.images_enabled(True, {})
    assert images.unusable("/usr/bin/podman", 1000) is not None
    assert images.unusable(None, 0) == "podman is not installed"
    assert images.unusable("/usr/bin/podman", 0) is None


@pytest.mark.parametrize(
    ("annotations", "asks"),
    [
        ({images.IMAGE_ANNOTATION: "true"}, True),
        ({images.IMAGE_ANNOTATION: " True "}, True),
        ({images.IMAGE_ANNOTATION: "false"}, False),
        ({images.IMAGE_ANNOTATION: ""}, False),
        ({"other": "true"}, False),
        (None, False),
    ],
)
def test_a_pod_asks_for_its_image_by_annotation(
    annotations: dict[str, str] | None, asks: bool
) -> None:
    """A pod annotated run-from-image runs inside its image on a kubelet that runs no other pod
    that way; any other value, or none, leaves it on the host."""
    pod = {"metadata": {"name": "p", "annotations": annotations}}
    assert images.asks_for_image(pod) is asks


def test_programs_are_found_in_the_image_not_on_the_host(tmp_path: Path) -> None:
    (tmp_path / "opt" / "venv" / "bin").mkdir(parents=True)
    # A link that points inside the image (absent on the host) still counts.
    (tmp_path / "opt" / "venv" / "bin" / "python").symlink_to("/no/such/host/python3")
    path = "/opt/venv/bin:/usr/bin"
    assert images.find_program(tmp_path, "python", path, "/")
    assert not images.find_program(tmp_path, "agentpool", path, "/")
    assert images.find_program(tmp_path, "/opt/venv/bin/python", path, "/")
    assert images.find_program(tmp_path, "bin/python", path, "/opt/venv")


def test_programs_in_the_pods_volumes_are_found_where_they_are_mounted(tmp_path: Path) -> None:
    """A command a ConfigMap or emptyDir volume carries runs as on a real kubelet: the mount
    shadows the image below its mountPath, and a mountPath on ``PATH`` is searched."""
    rootfs, scripts = tmp_path / "rootfs", tmp_path / "volumes" / "scripts"
    (rootfs / "usr" / "bin").mkdir(parents=True)
    (rootfs / "scripts").mkdir()
    (rootfs / "scripts" / "hidden.sh").touch()  # under the mount: not what the container sees
    scripts.mkdir(parents=True)
    (scripts / "start.sh").touch()
    mounts = {"/scripts": scripts}
    assert images.find_program(rootfs, "/scripts/start.sh", "/usr/bin", "/", mounts)
    assert images.find_program(rootfs, "start.sh", "/scripts:/usr/bin", "/", mounts)
    assert images.find_program(rootfs, "./start.sh", "/usr/bin", "/scripts", mounts)
    assert not images.find_program(rootfs, "/scripts/hidden.sh", "/usr/bin", "/", mounts)
    assert not images.find_program(rootfs, "/scriptsx/start.sh", "/usr/bin", "/", mounts)


@pytest.mark.parametrize("answer", ["[]", "{}", "[42]", "not json"])
def test_an_inspection_podman_answers_oddly_is_an_error_the_kubelet_falls_back_on(
    tmp_path: Path, answer: str
) -> None:
    """The kubelet runs a pod on the host, saying why, when finding its image raises OSError or
    ValueError: an inspection it cannot read is one of those, never a crash of the pod's worker."""
    podman = tmp_path / "podman"
    podman.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        '  *"{{.Id}}"*) echo sha256:0123 ;;\n'
        f"  *json*) echo '{answer}' ;;\n"
        "esac\n"
    )
    podman.chmod(0o755)
    store = images.ImageStore(podman=str(podman))
    with pytest.raises(ValueError, match=r"podman image inspect agentpool:0\.1\.0"):
        asyncio.run(store.find("agentpool:0.1.0"))
