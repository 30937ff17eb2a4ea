"""Enters a container's root and execs its command: run by the local kubelet as a program.

    python -I enter.py SPEC.json

The kubelet starts it (as root, the leader of the container's process group, its environment the
container's) for a container it runs from an image. It

1. unshares a private mount namespace, so every mount below is the container's alone and goes
   when its last process does;
2. mounts an overlay of the image's read-only root with a fresh upper directory (the container's
   writable layer, in the pod's directory: the image itself is never written);
3. binds the host's /proc and /dev, then each of the spec's binds (the pod's volumes at their
   mountPaths, the pod's own /etc/hosts, the host's /etc/resolv.conf, the kubeconfig the kubelet
   wrote) into it: the sources are opened before the chroot and mounted after it, so a target
   path is resolved inside the image (where /var/run may be a link to /run) and never on the host;
4. chroots, enters the working directory, drops to the uid and gid, asks to be SIGKILLed with its
   parent (a change of uid clears that) and execs the command, the pid staying the same.

It uses the standard library only, since it runs on the host's interpreter in isolated mode. Any
failure is written to stderr (the container's log) and exits 128, as a container that could not
start.

This is a stand-in for a container runtime in tests and local runs, not isolation: the container
shares the host's network, pid and IPC namespaces, sees the host's whole /proc and /dev, and a
container that runs as uid 0 keeps every capability (it could remount, or leave the chroot). Run
only images you would run on the host itself; a cluster's kubelet and runtime are what isolate
untrusted agents.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import stat
import sys
from typing import Any

CLONE_NEWNS = 0x00020000
MS_RDONLY = 1
MS_NOSUID = 2
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1
START_FAILED = 128

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    _check(
        _libc.mount(
            None if source is None else source.encode(),
            target.encode(),
            None if fstype is None else fstype.encode(),
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {source} on {target}",
    )


def bind(source: str, target: str, *, read_only: bool) -> None:
    mount(source, target, None, MS_BIND | MS_REC)
    if read_only:
        mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID)


def make_target(target: str, *, directory: bool) -> None:
    """The mount point in the (chrooted) root: a directory, or an empty file for a file."""
    if directory:
        os.makedirs(target, exist_ok=True)
        return
    os.makedirs(os.path.dirname(target) or "/", exist_ok=True)
    if not os.path.exists(target):
        with open(target, "a"):
            pass


def enter(spec: dict[str, Any]) -> None:
    root = spec["root"]
    _check(_libc.unshare(CLONE_NEWNS), "unshare")
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    options = f"lowerdir={spec['lower']},upperdir={spec['upper']},workdir={spec['work']}"
    mount("overlay", root, "overlay", 0, options)
    for system in ("proc", "dev"):
        bind(f"/{system}", os.path.join(root, system), read_only=False)
    opened = []
    for source, target, read_only in spec["binds"]:
        fd = os.open(source, os.O_PATH | os.O_CLOEXEC)
        opened.append((fd, stat.S_ISDIR(os.fstat(fd).st_mode), target, bool(read_only)))
    os.chroot(root)
    os.chdir("/")
    for fd, directory, target, read_only in opened:
        make_target(target, directory=directory)
        bind(f"/proc/self/fd/{fd}", target, read_only=read_only)
        os.close(fd)
    workdir = spec["workdir"]
    os.makedirs(workdir, exist_ok=True)
    os.chdir(workdir)
    uid, gid = int(spec["uid"]), int(spec["gid"])
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
    if os.getppid() != int(spec["parent"]):
        # The kubelet died before the signal was asked for.
        os._exit(START_FAILED)
    # Python ignores these at start, and an ignored signal stays ignored across exec.
    for number in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(number, signal.SIG_DFL)


def main(argv: list[str]) -> int:
    with open(argv[1]) as handle:
        spec: dict[str, Any] = json.load(handle)
    command: list[str] = spec["argv"]
    try:
        enter(spec)
        os.execvpe(command[0], command, dict(os.environ))
    except OSError as error:
        print(f'container start: "{command[0]}": {error}', file=sys.stderr, flush=True)
        return START_FAILED
    return START_FAILED  # pragma: no cover - execvpe returns only by raising


if __name__ == "__main__":
    sys.exit(main(sys.argv))
