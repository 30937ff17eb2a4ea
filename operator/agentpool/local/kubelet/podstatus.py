"""Pod status as the local kubelet reports it, computed from what it observed: pure functions.

The kubelet keeps a :class:`PodObservation` per pod (the container's state, restarts, probe
results) and :func:`render_status` turns it into the ``status`` a real kubelet would write: phase,
conditions with stable ``lastTransitionTime``, containerStatuses with state and lastState, podIP.
The restart rules (restartPolicy, CrashLoopBackOff back-off) and the termination message live here
too, so they are tested as data. Only :mod:`agentpool.local.kubelet` calls this module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentpool.api.conditions import format_time

HOST_IP = "127.0.0.1"
NODE_NAME = "local"
NO_LOCAL_COMMAND = "NoLocalCommand"
NO_LOCAL_COMMAND_MESSAGE = (
    "the local kubelet runs the container's command as a local process, not its image; "
    "give the first container a command (for example: python -m agentpool.agent module:agent)"
)
#: The reason of the Warning Event a failed probe attempt posts, as a real kubelet's.
UNHEALTHY = "Unhealthy"
FALLBACK_TO_LOGS_ON_ERROR = "FallbackToLogsOnError"
#: What a real kubelet keeps of a container's output as its termination message under
#: FallbackToLogsOnError: the last 80 lines, of which at most the last 2048 bytes.
FALLBACK_LOG_LINES = 80
FALLBACK_LOG_BYTES = 2048


@dataclass(frozen=True)
class Waiting:
    reason: str
    message: str = ""


@dataclass(frozen=True)
class Running:
    started_at: datetime


@dataclass(frozen=True)
class Terminated:
    exit_code: int
    reason: str
    started_at: datetime | None
    finished_at: datetime
    message: str = ""
    signal: int | None = None


ContainerState = Waiting | Running | Terminated


@dataclass(frozen=True)
class PodObservation:
    """Everything the kubelet knows about one pod's first container at one moment."""

    container: str
    image: str
    state: ContainerState
    phase: str = "Pending"
    last_state: Terminated | None = None
    restart_count: int = 0
    ready: bool = False
    pod_ip: str | None = None
    start_time: datetime | None = None
    container_id: str = ""
    resources: Mapping[str, Any] | None = None
    reason: str | None = None
    message: str | None = None


def terminated_reason(exit_code: int) -> str:
    """The reason a real kubelet gives a container that exited with this code."""
    return "Completed" if exit_code == 0 else "Error"


def exit_code_of(returncode: int) -> int:
    """asyncio reports death by signal as -N; containers report 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def restarts(restart_policy: str, exit_code: int) -> bool:
    """Whether a container that exited with exit_code is started again."""
    if restart_policy == "Never":
        return False
    if restart_policy == "OnFailure":
        return exit_code != 0
    return True


def final_phase(exit_code: int) -> str:
    """The phase of a pod whose only container exited and will not restart."""
    return "Succeeded" if exit_code == 0 else "Failed"


def backoff_delay(restart_count: int, *, initial: float, cap: float) -> float:
    """CrashLoopBackOff: initial, then doubling per restart, never above cap."""
    if restart_count <= 0:
        return 0.0
    return float(min(cap, initial * 2 ** (restart_count - 1)))


def with_termination_message(
    terminated: Terminated, *, policy: str, output_tail: bytes
) -> Terminated:
    """The termination as a real kubelet reports it under the container's
    terminationMessagePolicy.

    A local process has no container filesystem, so it never writes a termination message
    file: under FallbackToLogsOnError an exit with an error takes the end of the run's output
    instead (``output_tail``: at least its last FALLBACK_LOG_BYTES), after any message of the
    kubelet's own, as kuberuntime does.
    """
    if policy != FALLBACK_TO_LOGS_ON_ERROR or terminated.exit_code == 0:
        return terminated
    kept = b"".join(output_tail.splitlines(keepends=True)[-FALLBACK_LOG_LINES:])
    output = kept[-FALLBACK_LOG_BYTES:].decode(errors="replace")
    if not output:
        return terminated
    message = f"{terminated.message}: {output}" if terminated.message else output
    return dataclasses.replace(terminated, message=message)


def qos_class(resources: Mapping[str, Any] | None) -> str:
    """Kubernetes' QoS class of a single-container pod, recorded (never enforced) locally."""
    requests = dict((resources or {}).get("requests") or {})
    limits = dict((resources or {}).get("limits") or {})
    if not requests and not limits:
        return "BestEffort"
    guaranteed = all(
        name in limits and (requests.get(name, limits[name]) == limits[name])
        for name in ("cpu", "memory")
    )
    return "Guaranteed" if guaranteed else "Burstable"


def render_state(state: ContainerState | None) -> dict[str, Any]:
    if state is None:
        return {}
    if isinstance(state, Waiting):
        waiting: dict[str, Any] = {"reason": state.reason}
        if state.message:
            waiting["message"] = state.message
        return {"waiting": waiting}
    if isinstance(state, Running):
        return {"running": {"startedAt": format_time(state.started_at)}}
    terminated: dict[str, Any] = {
        "exitCode": state.exit_code,
        "reason": state.reason,
        "finishedAt": format_time(state.finished_at),
    }
    if state.started_at is not None:
        terminated["startedAt"] = format_time(state.started_at)
    if state.message:
        terminated["message"] = state.message
    if state.signal is not None:
        terminated["signal"] = state.signal
    return {"terminated": terminated}


def _condition(
    kind: str,
    status: bool,
    previous: Mapping[str, Mapping[str, Any]],
    now: datetime,
    *,
    reason: str | None = None,
    message: str | None = None,
) -> dict[str, Any]:
    value = "True" if status else "False"
    before = previous.get(kind)
    since = before.get("lastTransitionTime") if before and before.get("status") == value else None
    condition: dict[str, Any] = {
        "type": kind,
        "status": value,
        "lastProbeTime": None,
        "lastTransitionTime": since or format_time(now),
    }
    if reason and not status:
        condition["reason"] = reason
    if message and not status:
        condition["message"] = message
    return condition


def render_status(
    observed: PodObservation, *, previous: Mapping[str, Any], now: datetime
) -> dict[str, Any]:
    """The pod's ``status`` for observed, keeping each condition's transition time from previous."""
    before = {c.get("type", ""): c for c in previous.get("conditions") or []}
    running = isinstance(observed.state, Running)
    ready = running and observed.ready and observed.phase == "Running"
    if observed.phase == "Succeeded":
        not_ready_reason, not_ready_message = "PodCompleted", None
    else:
        not_ready_reason = "ContainersNotReady"
        not_ready_message = f"containers with unready status: [{observed.container}]"
    conditions = [
        _condition("PodReadyToStartContainers", observed.pod_ip is not None, before, now),
        _condition("Initialized", True, before, now),
        _condition("Ready", ready, before, now, reason=not_ready_reason, message=not_ready_message),
        _condition(
            "ContainersReady",
            ready,
            before,
            now,
            reason=not_ready_reason,
            message=not_ready_message,
        ),
        _condition("PodScheduled", True, before, now),
    ]
    container_status: dict[str, Any] = {
        "name": observed.container,
        "image": observed.image,
        "imageID": "",
        "ready": ready,
        "started": running,
        "restartCount": observed.restart_count,
        "state": render_state(observed.state),
        "lastState": render_state(observed.last_state),
    }
    if observed.container_id:
        container_status["containerID"] = observed.container_id
    if observed.resources:
        container_status["resources"] = dict(observed.resources)
    status: dict[str, Any] = {
        "phase": observed.phase,
        "conditions": conditions,
        "hostIP": HOST_IP,
        "hostIPs": [{"ip": HOST_IP}],
        "containerStatuses": [container_status],
        "qosClass": qos_class(observed.resources),
    }
    if observed.pod_ip:
        status["podIP"] = observed.pod_ip
        status["podIPs"] = [{"ip": observed.pod_ip}]
    if observed.start_time is not None:
        status["startTime"] = format_time(observed.start_time)
    # Present keys are always sent so that a merge patch clears a reason that no longer applies.
    status["reason"] = observed.reason
    status["message"] = observed.message
    return status
