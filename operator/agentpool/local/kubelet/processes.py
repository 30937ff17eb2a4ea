"""Local processes for pod containers: their command, environment, process group, and its end.

The local kubelet runs each pod's container as one process group (``start_new_session``), so the
container's own children belong to it and a single signal reaches all of them, as a container's
cgroup would on a node. Only :mod:`agentpool.local.kubelet` and its pod workers call this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shutil
import signal
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# Variables a local command needs to find its tools and its Python; everything else of the
# kubelet's own environment (credentials, KUBECONFIG) stays out, as it would from a container.
INHERITED_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "VIRTUAL_ENV",
    "PYTHONPATH",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
)

PYTHON_NAMES = frozenset({"python", "python3"})


def resolve_command(argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """The argv to run: ``python``/``python3`` becomes this interpreter, so agents share its venv.

    Other programs are looked up on the container's PATH; a name that is not found is returned as
    is and the exec fails, which the kubelet reports like a container that could not start.
    """
    if not argv:
        raise ValueError("empty command")
    first, rest = argv[0], list(argv[1:])
    if first in PYTHON_NAMES:
        return [sys.executable, *rest]
    if os.sep not in first:
        found = shutil.which(first, path=env.get("PATH"))
        if found:
            return [found, *rest]
    return [first, *rest]


def base_env(source: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment every local container starts from, before the pod's own variables.

    The interpreter's directory goes first on PATH so that the venv's console scripts (such as
    ``agentpool``) win, and output is unbuffered so ``kubectl logs`` shows lines as they come.
    """
    source = os.environ if source is None else source
    env = {key: source[key] for key in INHERITED_ENV if key in source}
    bindir = str(Path(sys.executable).parent)
    path = env.get("PATH", os.defpath)
    if bindir not in path.split(os.pathsep):
        path = os.pathsep.join([bindir, path])
    env["PATH"] = path
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass
class Running:
    """A started container process; ``pgid`` equals the leader's pid."""

    process: asyncio.subprocess.Process
    started_at: float

    @property
    def pgid(self) -> int:
        return self.process.pid


async def spawn(
    argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, log_path: Path
) -> Running:
    """Start argv as the leader of a new session, appending stdout and stderr to log_path.

    Raises OSError when argv[0] cannot be executed (checked here, since under setpriv the failed
    exec would otherwise look like a program that ran and exited).
    """
    program = argv[0]
    if not executable(program, cwd):
        raise FileNotFoundError(
            f'exec: "{program}": executable file not found in $PATH or not executable'
        )
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        process = await asyncio.create_subprocess_exec(
            *die_with_parent(argv),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            env=dict(env),
            cwd=str(cwd),
            start_new_session=True,
        )
    return Running(process=process, started_at=time.time())


def output_size(log_path: Path) -> int:
    """How much output the log holds so far: where the next run's own output starts."""
    try:
        return log_path.stat().st_size
    except FileNotFoundError:
        return 0


def output_tail(log_path: Path, *, since: int, limit: int) -> bytes:
    """The last ``limit`` bytes of the output written to the log after offset ``since``."""
    try:
        with log_path.open("rb") as log:
            size = log.seek(0, os.SEEK_END)
            log.seek(max(since, size - limit))
            return log.read()
    except FileNotFoundError:
        return b""


def executable(program: str, cwd: Path) -> bool:
    """Whether program (a path, as :func:`resolve_command` gives it) can be executed from cwd."""
    if os.sep not in program:
        return False
    path = cwd / program
    return path.is_file() and os.access(path, os.X_OK)


def die_with_parent(argv: Sequence[str]) -> list[str]:
    """argv wrapped so that the container's leader is SIGKILLed if the kubelet's process dies.

    A kubelet stopped normally ends every group itself; this covers a host process killed outright
    (SIGKILL, or SIGTERM with no handler), which would otherwise leave agents running unowned.
    util-linux ``setpriv`` sets the parent-death signal and then execs the command, so the pid
    stays the container's; a ``preexec_fn`` would run Python between fork and exec in a threaded
    process, which can deadlock. Where setpriv is missing the normal stop is all there is.
    """
    setpriv = _setpriv()
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else list(argv)


@functools.cache
def _setpriv() -> str | None:
    if not sys.platform.startswith("linux"):
        return None
    return shutil.which("setpriv")


def signal_group(pgid: int, signum: int) -> bool:
    """Send signum to the process group; False when no process of it is left."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    except PermissionError:
        # A zombie leader whose group is otherwise gone can answer EPERM on some kernels.
        return group_alive(pgid)
    return True


def _proc_files(name: str) -> Iterator[tuple[int, bytes]]:
    """Each process's pid and its ``/proc/<pid>/<name>``, for the processes that can be read
    (one may exit, or belong to another user, while it is scanned)."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/{name}", "rb") as handle:
                content = handle.read()
        except OSError:
            continue
        yield int(entry.name), content


def group_members(pgid: int) -> list[int]:
    """Pids in process group pgid that are still running (zombies excluded), from /proc."""
    members = []
    for pid, stat in _proc_files("stat"):
        # The command name is in parentheses and may hold spaces, so split after the last ')'.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z":
            members.append(pid)
    return members


def pod_processes(pod_ip: str) -> list[int]:
    """Pids of the processes the local kubelet started for the pod with this IP (each carries
    ``POD_IP`` in its environment), so a test or benchmark can kill an agent as a crash would."""
    needle = f"POD_IP={pod_ip}".encode()
    return [pid for pid, environ in _proc_files("environ") if needle in environ.split(b"\0")]


def group_alive(pgid: int) -> bool:
    """Whether any non-zombie process of the group remains."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    # killpg also succeeds for zombies that an init process has not reaped yet.
    return bool(group_members(pgid))


async def wait_group_gone(pgid: int, timeout: float, *, interval: float = 0.05) -> bool:
    """Wait until the whole group has ended; True if it did within timeout."""
    deadline = time.monotonic() + max(timeout, 0.0)
    while group_alive(pgid):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(interval)
    return True


async def terminate_group(running: Running, grace: float) -> int:
    """SIGTERM the group, wait up to grace seconds for all of it, then SIGKILL what remains.

    Returns the leader's exit code (negative for a signal), as :class:`asyncio.subprocess.Process`
    reports it.
    """
    pgid = running.pgid
    deadline = time.monotonic() + max(grace, 0.0)
    if signal_group(pgid, signal.SIGTERM):
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(running.process.wait(), timeout=max(grace, 0.0))
        await wait_group_gone(pgid, deadline - time.monotonic())
    signal_group(pgid, signal.SIGKILL)
    code = await running.process.wait()
    await wait_group_gone(pgid, 5.0)
    return code
