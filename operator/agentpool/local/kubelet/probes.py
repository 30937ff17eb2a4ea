"""Container probes as the kubelet runs them: httpGet, tcpSocket and exec, with their thresholds.

:class:`ProbeSpec` reads a probe from a pod spec, :func:`run_probe` performs one attempt,
:class:`ProbeTracker` applies successThreshold and failureThreshold to the attempts (pure, so the
threshold rules are tested without processes), and :func:`probe_on_schedule` runs attempts on the
probe's schedule for both kinds of pod worker: the one that runs a process and the simulated one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from agentpool.local.kubelet import processes


@dataclass(frozen=True)
class ProbeSpec:
    """One probe of a container spec, with Kubernetes' defaults filled in."""

    kind: str  # "httpGet", "tcpSocket", "exec" or an unsupported handler's name
    action: Mapping[str, Any]
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3

    @classmethod
    def parse(cls, probe: Mapping[str, Any]) -> ProbeSpec:
        kind = next((k for k in ("httpGet", "tcpSocket", "exec", "grpc") if k in probe), "none")
        return cls(
            kind=kind,
            action=probe.get(kind) or {},
            initial_delay=float(probe.get("initialDelaySeconds") or 0),
            period=float(probe.get("periodSeconds") or 10),
            timeout=float(probe.get("timeoutSeconds") or 1),
            success_threshold=int(probe.get("successThreshold") or 1),
            failure_threshold=int(probe.get("failureThreshold") or 3),
        )


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    message: str = ""


@dataclass
class ProbeTracker:
    """Turns single probe results into the container's probed state, honouring the thresholds.

    ``state`` starts as ``initial`` (False for readiness, True for liveness, as the kubelet does)
    and flips only after ``success_threshold`` successes or ``failure_threshold`` failures in a row.
    """

    success_threshold: int
    failure_threshold: int
    state: bool
    streak: int = 0
    last_message: str = field(default="")

    def observe(self, result: ProbeResult) -> bool:
        """Record one attempt; True when the probed state changed."""
        self.last_message = result.message
        if result.ok == self.state:
            self.streak = 0
            return False
        self.streak += 1
        needed = self.success_threshold if result.ok else self.failure_threshold
        if self.streak >= needed:
            self.state = result.ok
            self.streak = 0
            return True
        return False


async def probe_on_schedule(
    spec: ProbeSpec,
    attempt: Callable[[], Awaitable[ProbeResult]],
    changed: Callable[[bool], bool],
    *,
    initial: bool,
) -> None:
    """Attempt the probe after its initial delay and then every period, counting from each
    attempt's start, from the probed state ``initial`` (False for readiness, True for liveness);
    ``changed`` hears each flip of the state, through the thresholds, and returns True to stop.
    Cancelled by the worker when the container ends."""
    tracker = ProbeTracker(spec.success_threshold, spec.failure_threshold, state=initial)
    await asyncio.sleep(spec.initial_delay)
    while True:
        began = time.monotonic()
        if tracker.observe(await attempt()) and changed(tracker.state):
            return
        await asyncio.sleep(max(0.0, spec.period - (time.monotonic() - began)))


def resolve_port(port: Any, container: Mapping[str, Any]) -> int:
    """A probe port: a number, or the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    if isinstance(port, str) and port.isdigit():
        return int(port)
    for declared in container.get("ports") or []:
        if declared.get("name") == port:
            return int(declared["containerPort"])
    raise ValueError(f"port {port!r} is neither a number nor a named port of the container")


async def run_probe(
    spec: ProbeSpec,
    *,
    pod_ip: str,
    container: Mapping[str, Any],
    session: aiohttp.ClientSession,
    env: Mapping[str, str],
    cwd: Path,
) -> ProbeResult:
    """Perform one probe attempt within its timeout."""
    try:
        async with asyncio.timeout(spec.timeout):
            if spec.kind == "httpGet":
                return await _http_get(spec.action, pod_ip, container, session)
            if spec.kind == "tcpSocket":
                return await _tcp_socket(spec.action, pod_ip, container)
            if spec.kind == "exec":
                return await _exec(spec.action.get("command") or [], env, cwd)
    except TimeoutError:
        return ProbeResult(False, f"probe timed out after {spec.timeout:g}s")
    except (OSError, aiohttp.ClientError, ValueError) as error:
        return ProbeResult(False, f"probe failed: {error}")
    return ProbeResult(False, f"the local kubelet does not run {spec.kind} probes")


async def _http_get(
    action: Mapping[str, Any],
    pod_ip: str,
    container: Mapping[str, Any],
    session: aiohttp.ClientSession,
) -> ProbeResult:
    host = action.get("host") or pod_ip
    port = resolve_port(action.get("port"), container)
    scheme = str(action.get("scheme") or "HTTP").lower()
    path = str(action.get("path") or "/")
    if not path.startswith("/"):
        path = "/" + path
    headers = {h["name"]: h["value"] for h in action.get("httpHeaders") or []}
    headers.setdefault("User-Agent", "kube-probe/1.32")
    url = f"{scheme}://{host}:{port}{path}"
    try:
        async with session.get(url, headers=headers, ssl=False, allow_redirects=True) as response:
            await response.read()
            if 200 <= response.status < 400:
                return ProbeResult(True)
            return ProbeResult(False, f"HTTP probe failed with statuscode: {response.status}")
    except aiohttp.ClientConnectorError as error:
        return ProbeResult(False, f'Get "{url}": {dial_error(host, port, error.os_error)}')


def dial_error(host: str, port: int, error: OSError) -> str:
    """A failed connection in the words a real kubelet's probe reports (Go's net package), so
    the Unhealthy Event reads the same on the local kubelet: ``dial tcp 127.0.0.5:8080:
    connect: connection refused``."""
    if isinstance(error, ConnectionRefusedError):
        cause = "connection refused"
    else:
        cause = (error.strerror or str(error) or type(error).__name__).lower()
    return f"dial tcp {host}:{port}: connect: {cause}"


async def _tcp_socket(
    action: Mapping[str, Any], pod_ip: str, container: Mapping[str, Any]
) -> ProbeResult:
    host = action.get("host") or pod_ip
    port = resolve_port(action.get("port"), container)
    try:
        _, writer = await asyncio.open_connection(host, port)
    except OSError as error:
        return ProbeResult(False, dial_error(host, port, error))
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return ProbeResult(True)


async def _exec(command: Sequence[str], env: Mapping[str, str], cwd: Path) -> ProbeResult:
    if not command:
        return ProbeResult(False, "exec probe has no command")
    argv = processes.resolve_command(command, env)
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=dict(env),
        cwd=str(cwd),
        start_new_session=True,
    )
    try:
        output, _ = await process.communicate()
    except asyncio.CancelledError:
        # A probe that outlives its timeout must not leave its command running.
        processes.signal_group(process.pid, 9)
        await process.wait()
        raise
    if process.returncode == 0:
        return ProbeResult(True)
    text = output.decode(errors="replace").strip()[-200:]
    return ProbeResult(False, f"command exited {process.returncode}: {text}".rstrip(": "))
