"""The ``agentpool`` command behaves as a Unix tool: quiet on a closed pipe, one clear line when
no cluster is configured.

Each test runs the real entry point in a child process, as a shell would.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: ``agentpool results`` with the cluster faked: a run of 20,000 outputs, far more than a pipe
#: holds, so the writer is still writing when the reader goes away.
RESULTS_WITH_A_FAKE_CLUSTER = """
import sys
from agentpool import cli
from agentpool.io import kube

class FakeKube:
    async def get_custom(self, plural, namespace, name):
        return {"status": {"items": {str(n): "x" * 100 for n in range(20000)}}}
    def close(self):
        pass

kube.Kube.connect = classmethod(lambda cls, connection: FakeKube())
sys.exit(cli.main(["results", "big"]))
"""


def test_results_into_a_closed_pipe_exit_quietly() -> None:
    """`agentpool results RUN | head -1` prints the first line and no BrokenPipe traceback."""
    writer = subprocess.Popen(
        [sys.executable, "-c", RESULTS_WITH_A_FAKE_CLUSTER],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert writer.stdout is not None
    assert writer.stderr is not None
    first = writer.stdout.readline()
    writer.stdout.close()  # what `head -1` does once it has its line
    stderr = writer.stderr.read().decode()
    writer.stderr.close()
    code = writer.wait(timeout=60)
    assert first.startswith(b"{")
    assert stderr == ""
    assert code == 141  # 128 + SIGPIPE, as a shell reports a tool that a closed pipe ended


def test_no_kubeconfig_is_one_clear_line_and_exit_2(tmp_path: Path) -> None:
    """With no kubeconfig and no cluster around, the CLI says what is missing and how to fix
    it, in one line and without a traceback, and exits 2."""
    env = {**os.environ, "HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "missing")}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    done = subprocess.run(
        [sys.executable, "-m", "agentpool", "results", "r"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "ConfigException" not in done.stderr
    assert "kubeconfig" in lines[0]
    assert "--server" in lines[0]


def test_version_is_the_installed_distributions() -> None:
    """`agentpool --version` prints the version pip recorded, one line, and exits 0: what the
    image test runs inside the image."""
    from importlib.metadata import version

    done = subprocess.run(
        [sys.executable, "-m", "agentpool", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"agentpool {version('agentpool')}\n"
