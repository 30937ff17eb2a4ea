"""Probes as the local kubelet runs them, against a small HTTP server on a pod address."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from agentpool.local.kubelet import probes

HOST = "127.0.0.9"


@pytest.fixture
async def health() -> AsyncIterator[tuple[dict[str, int], int]]:
    """An HTTP server on a pod-like loopback address answering /healthz with a settable code."""
    state = {"code": 503}

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(status=state["code"])

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, HOST, 0)
    await site.start()
    port = runner.addresses[0][1]
    yield state, port
    await runner.cleanup()


async def attempt(spec: dict[str, object], tmp_path: Path) -> probes.ProbeResult:
    container = {"ports": [{"name": "http", "containerPort": spec.pop("_port", 1)}]}
    async with aiohttp.ClientSession() as session:
        return await probes.run_probe(
            probes.ProbeSpec.parse(spec),
            pod_ip=HOST,
            container=container,
            session=session,
            env={"PATH": "/usr/bin:/bin"},
            cwd=tmp_path,
        )


async def test_http_probe_follows_the_status_code(
    health: tuple[dict[str, int], int], tmp_path: Path
) -> None:
    """httpGet succeeds on 2xx/3xx and fails otherwise, by number or by named port."""
    state, port = health
    by_number = {"httpGet": {"path": "/healthz", "port": port}}
    assert not (await attempt(dict(by_number), tmp_path)).ok
    state["code"] = 200
    assert (await attempt(dict(by_number), tmp_path)).ok
    named = {"httpGet": {"path": "/healthz", "port": "http"}, "_port": port}
    assert (await attempt(named, tmp_path)).ok


async def test_tcp_probe(health: tuple[dict[str, int], int], tmp_path: Path) -> None:
    """tcpSocket succeeds when the pod address accepts connections, fails when nothing listens."""
    _, port = health
    assert (await attempt({"tcpSocket": {"port": port}}, tmp_path)).ok
    closed = await attempt({"tcpSocket": {"port": 1}, "timeoutSeconds": 1}, tmp_path)
    assert not closed.ok
    assert closed.message == f"dial tcp {HOST}:1: connect: connection refused"


async def test_exec_probe_and_timeout(tmp_path: Path) -> None:
    """exec succeeds on exit 0, fails otherwise, and a slow command fails at the timeout."""
    ok = await attempt({"exec": {"command": ["python", "-c", "pass"]}}, tmp_path)
    assert ok.ok
    failed = await attempt({"exec": {"command": [sys.executable, "-c", "exit(3)"]}}, tmp_path)
    assert not failed.ok
    assert "3" in failed.message
    slow = {"exec": {"command": ["sleep", "30"]}, "timeoutSeconds": 1}
    timed_out = await attempt(slow, tmp_path)
    assert not timed_out.ok
    assert "timed out" in timed_out.message


@pytest.mark.parametrize(
    ("initial", "results", "success", "failure", "changes", "final"),
    [
        (False, [True], 1, 3, [True], True),
        (False, [True, False, True, True], 2, 3, [False, False, False, True], True),
        (True, [False, False], 1, 3, [False, False], True),
        (True, [False, True, False, False, False], 1, 3, [False] * 4 + [True], False),
    ],
)
def test_tracker_thresholds(
    initial: bool,
    results: list[bool],
    success: int,
    failure: int,
    changes: list[bool],
    final: bool,
) -> None:
    """State flips only after successThreshold successes or failureThreshold failures in a row."""
    tracker = probes.ProbeTracker(success, failure, state=initial)
    assert [tracker.observe(probes.ProbeResult(r)) for r in results] == changes
    assert tracker.state is final


def test_probe_defaults() -> None:
    """Unset probe fields take Kubernetes' defaults."""
    spec = probes.ProbeSpec.parse({"httpGet": {"port": 80}})
    assert (spec.period, spec.timeout, spec.success_threshold, spec.failure_threshold) == (
        10.0,
        1.0,
        1,
        3,
    )
