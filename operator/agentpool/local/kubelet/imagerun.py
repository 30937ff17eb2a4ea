"""Starting a container inside its image: the files of one run and the process that enters it.

Each run (a start or restart) gets ``<pod dir>/containers/<name>-<restarts>/`` with the overlay's
upper and work directories (the container's writable layer: the image stays as podman keeps it),
the mount point of its root and the spec that :mod:`agentpool.local.kubelet.enter` reads. The
process starts as every local container does (:func:`agentpool.local.kubelet.processes.spawn`: its
own process group, SIGKILLed with the kubelet, output to the pod's log), as the host's interpreter
running ``enter.py``, which execs the container's command in the image, so the pid, the group and
the environment (``POD_IP`` included) are the container's. :func:`remove_run` removes the run's
files once its processes have ended; the mounts went with them.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agentpool.local.kubelet import enter, images, processes
from agentpool.local.kubelet.imageconfig import Launch
from agentpool.local.kubelet.images import LocalImage
from agentpool.local.kubelet.volumes import Bind

RESOLV_CONF = Path("/etc/resolv.conf")


def hosts_file(hostname: str, pod_ip: str) -> str:
    """The pod's /etc/hosts, as a kubelet writes it: localhost, and the pod's name at its IP."""
    return (
        "# Kubernetes-managed hosts file (the local kubelet).\n"
        "127.0.0.1\tlocalhost\n"
        "::1\tlocalhost ip6-localhost ip6-loopback\n"
        f"{pod_ip}\t{hostname}\n"
    )


def run_dir(pod_dir: Path, container: str, restarts: int) -> Path:
    return pod_dir / "containers" / f"{container}-{restarts}"


def spec_of(
    image: LocalImage, launch: Launch, binds: Sequence[Bind], *, run: Path, parent: int
) -> dict[str, object]:
    """What enter.py is told: the overlay's directories, the binds, the command and its user."""
    return {
        "lower": str(image.rootfs),
        "upper": str(run / "upper"),
        "work": str(run / "work"),
        "root": str(run / "root"),
        "binds": [[str(b.source), b.target, b.read_only] for b in binds],
        "argv": launch.argv,
        "workdir": launch.workdir,
        "uid": launch.uid,
        "gid": launch.gid,
        "parent": parent,
    }


@dataclass(frozen=True)
class RunPlace:
    """Where one run of a container lives: its pod's directory, its run's directory (from
    :func:`run_dir`), and the pod's name and IP its /etc/hosts holds."""

    pod_dir: Path
    run: Path
    hostname: str
    pod_ip: str


def lay_out(image: LocalImage, launch: Launch, binds: Sequence[Bind], place: RunPlace) -> Path:
    """The run's directories, the pod's /etc/hosts and the spec for enter.py; the spec's path."""
    run = place.run
    if run.exists():
        shutil.rmtree(run)
    for part in ("upper", "work", "root"):
        (run / part).mkdir(parents=True)
    hosts = place.pod_dir / "etc-hosts"
    hosts.write_text(hosts_file(place.hostname, place.pod_ip))
    every = [*binds, Bind(hosts, "/etc/hosts")]
    if RESOLV_CONF.exists():
        every.append(Bind(RESOLV_CONF, "/etc/resolv.conf", read_only=True))
    spec = run / "spec.json"
    spec.write_text(json.dumps(spec_of(image, launch, every, run=run, parent=os.getpid())))
    return spec


async def spawn_in_image(
    image: LocalImage,
    launch: Launch,
    binds: Sequence[Bind],
    place: RunPlace,
    *,
    log_path: Path,
) -> processes.Running:
    """Start the container's command inside the image; OSError when it cannot start."""
    program = launch.argv[0] if launch.argv else ""
    path = launch.env.get("PATH", "/usr/local/bin:/usr/bin:/bin")
    mounts = {bind.target: bind.source for bind in binds}
    if not program or not images.find_program(image.rootfs, program, path, launch.workdir, mounts):
        raise FileNotFoundError(
            f'exec: "{program}": executable file not found in $PATH of image {image.reference}'
        )
    spec = lay_out(image, launch, binds, place)
    argv = [sys.executable, "-I", enter.__file__, str(spec)]
    return await processes.spawn(argv, env=launch.env, cwd=place.run, log_path=log_path)


def remove_run(run: Path) -> None:
    """The run's writable layer and spec, once its processes have ended."""
    shutil.rmtree(run, ignore_errors=True)
