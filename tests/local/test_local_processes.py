"""Local container processes: loopback addresses, command resolution, ending a process group."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
from pathlib import Path

from agentpool.local.kubelet import processes
from cluster import wait_for_async


def test_python_runs_in_this_interpreter() -> None:
    """`python -m x` runs with the interpreter of this venv, other names come from PATH."""
    env = processes.base_env({"PATH": "/usr/bin:/bin"})
    assert processes.resolve_command(["python", "-m", "x"], env) == [sys.executable, "-m", "x"]
    assert processes.resolve_command(["python3"], env) == [sys.executable]
    assert processes.resolve_command(["sh", "-c", "true"], env)[0].endswith("/sh")
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    assert "KUBECONFIG" not in processes.base_env({"PATH": "/bin", "KUBECONFIG": "/x"})


FAMILY = textwrap.dedent(
    """
    import signal, subprocess, sys, time
    if sys.argv[1] == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
    print(child.pid, flush=True)
    time.sleep(600)
    """
)


async def start_family(tmp_path: Path, mode: str) -> tuple[processes.Running, Path]:
    log = tmp_path / f"{mode}.log"
    running = await processes.spawn(
        [sys.executable, "-c", FAMILY, mode],
        env=processes.base_env(),
        cwd=tmp_path,
        log_path=log,
    )
    return running, log


def complete_line(log: Path) -> str:
    text = log.read_text() if log.exists() else ""
    return text if text.endswith("\n") else ""


async def wait_for_line(log: Path) -> str:
    async def line() -> str:
        return complete_line(log)

    return await wait_for_async(line, timeout=30, message=f"no output in {log}")


async def test_terminate_ends_the_whole_group(tmp_path: Path) -> None:
    """SIGTERM reaches the group; a child that ignores it is SIGKILLed when the grace ends."""
    running, log = await start_family(tmp_path, "polite")
    child = int((await wait_for_line(log)).split()[0])
    assert os.getpgid(child) == running.pgid
    code = await processes.terminate_group(running, grace=1.0)
    assert code == -signal.SIGTERM
    assert not processes.group_alive(running.pgid)
    assert child not in processes.group_members(running.pgid)


async def test_stubborn_leader_is_killed_after_grace(tmp_path: Path) -> None:
    """A leader that ignores SIGTERM is SIGKILLed once the grace period is over."""
    running, log = await start_family(tmp_path, "stubborn")
    await wait_for_line(log)
    code = await processes.terminate_group(running, grace=0.5)
    assert code == -signal.SIGKILL
    assert not processes.group_alive(running.pgid)
