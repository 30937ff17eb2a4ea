"""Images in podman's local storage, as the local kubelet runs containers from them.

Asks podman (``podman image inspect``, ``podman image mount``) through subprocesses, without
blocking the event loop. A pod's image is looked up as written and, for a short name such as
``agentpool:0.1.0``, as ``localhost/agentpool:0.1.0`` (where ``podman build`` puts local builds).
What each image is (its config, its mounted root, its account files) is kept by image ID, so pods
started together pay for podman once while a new build of the same tag is picked up: only the
name's ID is asked again, after ``ttl`` seconds. Mounted images are unmounted by :meth:`close`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import posixpath
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from agentpool.local.kubelet.imageconfig import ImageConfig

logger = logging.getLogger(__name__)

#: What switches the local kubelet to running containers from local images (``1``), unless the
#: kubelet is given ``images=`` explicitly.
IMAGES_ENV = "AGENTPOOL_KUBELET_IMAGES"


@dataclass(frozen=True)
class LocalImage:
    """An image found in local storage, mounted read-only at ``rootfs``."""

    reference: str
    id: str
    config: ImageConfig
    rootfs: Path
    passwd: str = ""
    group: str = ""

    @property
    def digest(self) -> str:
        return f"sha256:{self.id}"


#: A pod annotated so (value "true") runs from its image even where the kubelet does not run every
#: pod's: a test or a CI job asks it of the pods it means, leaving the rest on the host. A real
#: kubelet ignores it.
IMAGE_ANNOTATION = "local.agentpool.dev/run-from-image"


def asks_for_image(pod: Mapping[str, Any]) -> bool:
    """Whether ``pod`` carries :data:`IMAGE_ANNOTATION` set to true."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(IMAGE_ANNOTATION, "")).strip().lower() == "true"


def images_enabled(value: bool | None, environ: Mapping[str, str]) -> bool:
    """The kubelet's setting, else ``AGENTPOOL_KUBELET_IMAGES`` (off unless ``1``/``true``)."""
    if value is not None:
        return value
    return environ.get(IMAGES_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def unusable(podman: str | None, euid: int) -> str | None:
    """Why this kubelet cannot run containers from images, or None when it can."""
    if euid != 0:
        return "the local kubelet is not root (mounting an image's filesystem needs it)"
    if podman is None:
        return "podman is not installed"
    return None


def candidates(reference: str) -> list[str]:
    """The names to try for an image: as written, then under ``localhost/`` for a short name
    (one whose first component names no registry)."""
    first, slash, _ = reference.partition("/")
    registry = slash and ("." in first or ":" in first or first == "localhost")
    return [reference] if registry else [reference, f"localhost/{reference}"]


def display_name(reference: str, tags: list[str]) -> str:
    """The tag podman knows the image by that the pod's reference names, else the reference."""
    for tag in tags:
        if tag == reference or tag.endswith("/" + reference):
            return tag
    return reference


def find_program(
    rootfs: Path,
    program: str,
    path: str,
    workdir: str,
    mounts: Mapping[str, Path] | None = None,
) -> bool:
    """Whether ``program`` exists in the container for exec: a path (relative to ``workdir``), or
    a name on ``path``. ``mounts`` maps the container's mountPaths to the host paths bound there,
    which shadow the image below them. Checked without following links, which point inside the
    container."""
    if "/" in program:
        where = program if program.startswith("/") else f"{workdir.rstrip('/')}/{program}"
        return os.path.lexists(_host_path(rootfs, mounts or {}, where))
    return any(
        os.path.lexists(_host_path(rootfs, mounts or {}, f"{directory.rstrip('/')}/{program}"))
        for directory in path.split(":")
        if directory.startswith("/")
    )


def _host_path(rootfs: Path, mounts: Mapping[str, Path], where: str) -> Path:
    """Where a path of the container is on the host: under the deepest mount that holds it, else
    in the image's root."""
    parts = PurePosixPath(posixpath.normpath(where)).parts[1:]
    targets = {posixpath.normpath(target): source for target, source in mounts.items()}
    for depth in range(len(parts), 0, -1):
        source = targets.get("/" + "/".join(parts[:depth]))
        if source is not None:
            return source.joinpath(*parts[depth:])
    return rootfs.joinpath(*parts)


async def _podman(podman: str, *args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        podman,
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    code = process.returncode if process.returncode is not None else 1
    return code, (out if code == 0 else err).decode(errors="replace").strip()


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


class ImageStore:
    """Finds pods' images in podman's storage; see the module's docstring."""

    def __init__(self, *, podman: str | None = None, ttl: float = 2.0) -> None:
        self.podman = podman if podman is not None else shutil.which("podman")
        self.ttl = ttl
        self._ids: dict[str, tuple[float, str | None, str]] = {}
        self._images: dict[str, LocalImage] = {}
        self._lock = asyncio.Lock()

    def unusable(self) -> str | None:
        return unusable(self.podman, os.geteuid())

    async def find(self, reference: str) -> LocalImage | None:
        """The image the pod names, mounted; None when local storage has no such image."""
        if self.podman is None or not reference:
            return None
        async with self._lock:
            image_id, name = await self._image_id(reference)
            if image_id is None:
                return None
            image = self._images.get(image_id)
            if image is None:
                image = await self._load(image_id, name, reference)
                self._images[image_id] = image
            return image

    async def _image_id(self, reference: str) -> tuple[str | None, str]:
        cached = self._ids.get(reference)
        if cached is not None and time.monotonic() - cached[0] < self.ttl:
            return cached[1], cached[2]
        assert self.podman is not None
        found: tuple[str | None, str] = (None, reference)
        for name in candidates(reference):
            code, out = await _podman(self.podman, "image", "inspect", "--format", "{{.Id}}", name)
            if code == 0 and out:
                found = (out.splitlines()[0], name)
                break
        self._ids[reference] = (time.monotonic(), *found)
        return found

    async def _load(self, image_id: str, name: str, reference: str) -> LocalImage:
        assert self.podman is not None
        code, out = await _podman(self.podman, "image", "inspect", "--format", "json", image_id)
        if code != 0:
            raise OSError(f"podman image inspect {name}: {out}")
        try:
            inspected = json.loads(out)[0]
            if not isinstance(inspected, dict):
                raise TypeError(f"an inspection is an object, not {type(inspected).__name__}")
        except (ValueError, IndexError, KeyError, TypeError) as error:
            raise ValueError(
                f"podman image inspect {name}: an answer not understood: {error}"
            ) from error
        code, mounted = await _podman(self.podman, "image", "mount", image_id)
        if code != 0:
            raise OSError(f"podman image mount {name}: {mounted}")
        rootfs = Path(mounted.splitlines()[-1])
        logger.info("image %s (%s) mounted at %s", name, image_id[:12], rootfs)
        return LocalImage(
            reference=display_name(reference, list(inspected.get("RepoTags") or [])),
            id=image_id,
            config=ImageConfig.parse(inspected.get("Config")),
            rootfs=rootfs,
            passwd=_read(rootfs / "etc" / "passwd"),
            group=_read(rootfs / "etc" / "group"),
        )

    async def close(self) -> None:
        """Unmount every image this store mounted, once no ``find`` is mounting one."""
        async with self._lock:
            images, self._images = list(self._images.values()), {}
            self._ids.clear()
            if self.podman is None:
                return
            for image in images:
                code, out = await _podman(self.podman, "image", "unmount", image.id)
                if code != 0:
                    logger.warning("podman image unmount %s: %s", image.reference, out)
