"""``agentpool call`` and ``agentpool lease`` as a person runs them in a shell.

Each test runs the real entry point in a child process against the test cluster: ``call`` prints
the output as JSON or fails with the reason; ``lease`` prints where the agent is and how to read
the token (never the token), holds the lease until Ctrl-C and then releases it.
"""

from __future__ import annotations

import base64
import json
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

import pytest
import yaml
from client_support import FAST, ClientCluster, Outside, kubeconfig_in

from cluster import wait_for
from docblocks import REPO, block_for, run_shell_block

pytestmark = pytest.mark.cluster


def agentpool(*args: str) -> list[str]:
    return [sys.executable, "-m", "agentpool", *args]


def test_call_prints_the_output_as_json(client_cluster: ClientCluster, outside: Outside) -> None:
    """`agentpool call POOL --item JSON` prints the agent's output and exits 0."""
    pool = outside.pool("p", agents=1)
    item = {"text": "hello", "n": [1, 2]}
    done = subprocess.run(
        agentpool(
            "call", pool, "--item", json.dumps(item), *client_cluster.options(outside.namespace)
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == item


def test_the_readmes_call_prints_the_output(
    client_cluster: ClientCluster, outside: Outside, tmp_path: Path
) -> None:
    """The README's `agentpool call`, run by bash as printed with a kubeconfig whose context's
    namespace holds the quickstart pool, prints the slow_start agent's answer for the item."""
    pool = yaml.safe_load((REPO / "examples" / "quickstart" / "pool.yaml").read_text())
    outside.create("agentpools", "quickstart", pool["spec"])
    wait_for(lambda: outside.available("quickstart") >= 1, 90, message="quickstart ready")
    block = block_for(
        "tests/client/test_client_cli.py::test_the_readmes_call_prints_the_output",
        REPO / "README.md",
    )
    kubeconfig = kubeconfig_in(client_cluster, outside.namespace, tmp_path / "kubeconfig")
    done = run_shell_block(
        block,
        kubeconfig=kubeconfig,
        bindir=Path(sys.executable).parent,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    output = json.loads(done.stdout)
    assert output["length"] == len('{"text":"hi"}'), output


def test_call_fails_with_the_reason_and_message(
    client_cluster: ClientCluster, outside: Outside
) -> None:
    """A failed item exits 1 with one line naming the agent's reason and message, no
    traceback; so does a pool that does not exist, with the operator's reason."""
    pool = outside.pool("p", agents=1, agent="slow_start", env=FAST)
    options = client_cluster.options(outside.namespace)
    item = json.dumps({"fail": True, "message": "bad input"})
    failed = subprocess.run(
        agentpool("call", pool, "--item", item, *options),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert failed.returncode == 1
    assert failed.stderr.strip() == "agentpool: HandlerError: ValueError: bad input"
    absent = subprocess.run(
        agentpool("call", "absent", "--item", "1", "--checkout-timeout", "2", *options),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert absent.returncode == 1
    assert absent.stderr.startswith("agentpool: NotFound: ")
    assert "Traceback" not in failed.stderr + absent.stderr


def _follow(stream: IO[str], into: list[str]) -> None:
    for line in stream:
        into.append(line)


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_lease_holds_an_agent_until_stopped_and_never_prints_the_token(
    client_cluster: ClientCluster, outside: Outside, stop: signal.Signals
) -> None:
    """`agentpool lease POOL` prints the endpoint, the lease's name and a kubectl command that
    reads the token, holds the lease Bound while it runs, and on Ctrl-C or SIGTERM (`kill`, a
    container stopped) deletes it, says so and exits 0, well before the lease's ttl would have
    freed the agent. The token itself appears nowhere in what it prints."""
    pool = outside.pool("p", agents=1)
    options = client_cluster.options(outside.namespace)
    context = ["--lease-context", '{"user": "ada"}']
    command = agentpool("lease", pool, "--ttl", "30", *context, *options)
    printed: list[str] = []
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as holder:
        assert holder.stdout is not None
        assert holder.stderr is not None
        reader = threading.Thread(target=_follow, args=(holder.stdout, printed), daemon=True)
        reader.start()
        try:
            wait_for(lambda: any("Ctrl-C" in line for line in printed), 60, message="lease held")
            said = re.fullmatch(
                r"lease (\S+): agent (\S+) of pool p\nendpoint: (\S+)\ntoken: +(.+)\n",
                "".join(printed[:3]),
            )
            assert said is not None, printed
            lease, agent, endpoint, token_command = said.groups()
            held = outside.status("agentleases", lease)
            assert (held["phase"], held["agent"], held["endpoint"]) == ("Bound", agent, endpoint)
            [spec] = [each["spec"] for each in outside.leases()]
            assert spec["context"] == {"user": "ada"}
            secret = held["tokenSecretRef"]["name"]
            assert token_command.endswith(
                f"get secret {secret} -n {outside.namespace} -o jsonpath='{{.data.token}}'"
                " | base64 -d"
            )
            data = outside.core.read_namespaced_secret(secret, outside.namespace).data
            token = base64.b64decode(data["token"]).decode()
            holder.send_signal(stop)
            assert holder.wait(60) == 0
        finally:
            if holder.poll() is None:
                holder.kill()
        reader.join(10)
        errors = holder.stderr.read()
    assert printed[-1] == f"released lease {lease}\n"
    assert token not in "".join(printed) + errors
    # Released, not expired: the ttl of 30 s has not run out when the agent is idle again.
    outside.returned(pool, 1, timeout=20)


def test_submit_runs_the_items_of_a_json_lines_file_from_stdin(
    client_cluster: ClientCluster, outside: Outside
) -> None:
    """`agentpool submit POOL -f -` makes a PoolRun of the lines on stdin and prints its name,
    which `agentpool results` then reads every output of; the run is to be deleted an hour
    after it ends, unless --ttl-after-finished says when or --keep keeps it."""
    pool = outside.pool("p", agents=1)
    options = client_cluster.options(outside.namespace)
    items = [{"id": f"i{n}", "text": f"item {n}"} for n in range(3)]
    lines = "\n".join(json.dumps(item) for item in items) + "\n"
    submitted = subprocess.run(
        agentpool("submit", pool, "-f", "-", "--item-id", "id", "--cap", "2", *options),
        input=lines,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert submitted.returncode == 0, submitted.stderr
    name = submitted.stdout.strip()
    [run] = outside.objects("poolruns")
    assert run["metadata"]["name"] == name
    assert (run["spec"]["source"]["items"], run["spec"]["cap"]) == (items, 2)
    assert run["spec"]["ttlSecondsAfterFinished"] == 3600
    wait_for(
        lambda: outside.status("poolruns", name).get("phase") == "Succeeded",
        90,
        message=f"run {name} succeeded",
    )
    results = subprocess.run(
        agentpool("results", name, *options), capture_output=True, text=True, timeout=120
    )
    assert results.returncode == 0, results.stderr
    outputs = [json.loads(line) for line in results.stdout.splitlines()]
    assert sorted(record["id"] for record in outputs) == ["i0", "i1", "i2"]
    names = {}
    for flags in (["--ttl-after-finished", "60"], ["--keep"]):
        done = subprocess.run(
            agentpool("submit", pool, "-f", "-", *flags, *options),
            input="1\n",
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        names[flags[0]] = done.stdout.strip()
    ttls = {
        run["metadata"]["name"]: run["spec"].get("ttlSecondsAfterFinished")
        for run in outside.objects("poolruns")
    }
    assert (ttls[names["--ttl-after-finished"]], ttls[names["--keep"]]) == (60, None)
