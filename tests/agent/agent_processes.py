"""Running agents as real processes for the SDK tests: start, find the port, stop, read logs.

Each agent is ``python -m agentpool.agent TARGET`` on 127.0.0.1 with port 0 and a fresh random
token; the test learns the port from the agent's own "listening on" log line, so no port can be
taken between choosing and binding it.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "agents"
FIXTURES = Path(__file__).resolve().parent / "fixture_agents.py"
LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")
DEADLINE_SECONDS = 30.0


@dataclass
class AgentProcess:
    """One running agent: its process, where it serves, its token and its log files."""

    process: subprocess.Popen[bytes]
    endpoint: str
    token: str
    stdout: Path
    stderr: Path

    def logs(self) -> str:
        """Everything the agent has written so far, stdout then stderr."""
        return self.stdout.read_text(errors="replace") + self.stderr.read_text(errors="replace")

    def terminate(self) -> None:
        """Send SIGTERM, as a kubelet does when a pod is deleted."""
        self.process.send_signal(signal.SIGTERM)

    async def exit_code(self, timeout: float = DEADLINE_SECONDS) -> int:
        """Wait for the process to exit and return its status."""
        await wait_for(lambda: self.process.poll() is not None, timeout=timeout, what="exit")
        code = self.process.returncode
        assert code is not None
        return code

    def stop(self) -> None:
        """End the process if it still runs: SIGTERM, then SIGKILL past a deadline."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def agent_env(token: str | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of an agent process: loopback, any free port, the given token."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT", "INVOCATIONS"))}
    env.update({"AGENT_HOST": "127.0.0.1", "AGENT_PORT": "0", "PYTHONUNBUFFERED": "1"})
    if token is not None:
        env["AGENTPOOL_TOKEN"] = token
    env.update(extra or {})
    return env


def launch(
    target: str, logs: Path, *, token: str | None, env: dict[str, str] | None = None, cwd: Path
) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """Start ``python -m agentpool.agent target`` with its output in files under ``logs``."""
    logs.mkdir(parents=True, exist_ok=True)
    stdout, stderr = logs / "stdout.log", logs / "stderr.log"
    with stdout.open("wb") as out, stderr.open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "agentpool.agent", target],
            stdout=out,
            stderr=err,
            env=agent_env(token, env),
            cwd=cwd,
        )
    return process, stdout, stderr


async def start_agent(
    target: str, logs: Path, *, env: dict[str, str] | None = None, cwd: Path | None = None
) -> AgentProcess:
    """Start an agent and wait until it listens (not until it is ready: start-up may be gated)."""
    token = secrets.token_hex(16)
    process, stdout, stderr = launch(target, logs, token=token, env=env, cwd=cwd or logs)
    found: list[str] = []

    def listening() -> bool:
        if process.poll() is not None:
            raise AssertionError(
                f"agent {target} exited with {process.returncode} before listening:\n"
                + stdout.read_text(errors="replace")
                + stderr.read_text(errors="replace")
            )
        match = LISTENING.search(stdout.read_text(errors="replace"))
        if match:
            found.append(match.group(1))
        return bool(match)

    await wait_for(listening, what=f"{target} to listen")
    return AgentProcess(process, found[0], token, stdout, stderr)


#: The ``spawn`` fixture: ``await spawn(target, env=..., cwd=...)`` gives a listening agent.
Spawn = Callable[..., Awaitable[AgentProcess]]


async def wait_for(
    condition: Callable[[], bool], *, timeout: float = DEADLINE_SECONDS, what: str
) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` past the deadline."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)


async def wait_until(
    condition: Callable[[], Awaitable[bool]], *, timeout: float = DEADLINE_SECONDS, what: str
) -> None:
    """Like ``wait_for`` for a condition that must be awaited (an HTTP call)."""
    deadline = time.monotonic() + timeout
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)
