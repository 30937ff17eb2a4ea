"""Pod manifests for the local kubelet tests: small Python programs run as pod commands."""

from __future__ import annotations

import re
import textwrap
from typing import Any

# Serves /healthz on AGENT_HOST:8080: 503 while the file named by READY_FILE is absent (when set),
# 200 otherwise. Every answer is logged, so a test can tell that probes arrived.
HEALTH_SERVER = textwrap.dedent(
    """
    import http.server, os, pathlib
    gate = os.environ.get("READY_FILE")
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            code = 200 if not gate or pathlib.Path(gate).exists() else 503
            self.send_response(code)
            self.end_headers()
            print("probe", code, flush=True)
        def log_message(self, *args):
            pass
    host = os.environ["AGENT_HOST"]
    print("serving on", host, "pod", os.environ.get("POD_NAME"), flush=True)
    http.server.HTTPServer((host, 8080), Health).serve_forever()
    """
)

# Starts a child that ignores SIGTERM, prints both pids, then waits; its leader exits on SIGTERM.
FAMILY = textwrap.dedent(
    """
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
    print("pids", os.getpid(), child.pid, flush=True)
    time.sleep(600)
    """
)


def printed_pids(log: str) -> tuple[int, int] | None:
    """The pids a FAMILY pod printed, once their whole line is in its log (which may be read
    while the line is being written)."""
    found = re.search(r"^pids (\d+) (\d+)\n", log, re.MULTILINE)
    return (int(found[1]), int(found[2])) if found else None


def pod(
    name: str,
    script: str | None,
    *,
    env: dict[str, str] | None = None,
    readiness: dict[str, Any] | None = None,
    restart_policy: str = "Always",
    grace: int | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": "python:3.11-slim",
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()]
        + [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
    }
    if script is not None:
        container["command"] = ["python", "-c", script]
    if readiness is not None:
        container["readinessProbe"] = readiness
    spec: dict[str, Any] = {"containers": [container], "restartPolicy": restart_policy}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"test": "local-kubelet"}},
        "spec": spec,
    }


def http_readiness(period: int = 1, failure_threshold: int = 1) -> dict[str, Any]:
    return {
        "httpGet": {"path": "/healthz", "port": 8080},
        "periodSeconds": period,
        "failureThreshold": failure_threshold,
    }
