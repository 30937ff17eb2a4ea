"""Reading an agent pod: from its manifest and status to the pool core's :class:`ObservedAgent`.

Pure functions over the pod as a dict in wire form. The pool handler calls :func:`observe_pod`
for every pod the watch has shown it and hands the result to the broker, which adds what only
it knows (busy, uses, failures in a row) before the planner reads it. Times are seconds since
the epoch, the clock the operator gives the core as ``now``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentpool.api.raw import RawBody
from agentpool.pool.manifests import TEMPLATE_HASH_ANNOTATION, TOKEN_HASH_ANNOTATION
from agentpool.pool.observed import ObservedAgent


def epoch(timestamp: str | None) -> float | None:
    """An RFC 3339 timestamp as seconds since the epoch (None stays None)."""
    if not timestamp:
        return None
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def condition(pod: RawBody, kind: str) -> dict[str, Any] | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            found: dict[str, Any] = cond
            return found
    return None


def is_ready(pod: RawBody) -> bool:
    """Ready as the pool understands it: Running, Ready condition True, not being deleted."""
    status = pod.get("status") or {}
    if pod["metadata"].get("deletionTimestamp") or status.get("phase") != "Running":
        return False
    ready = condition(pod, "Ready")
    return bool(ready and ready.get("status") == "True")


def ready_since(pod: RawBody) -> float | None:
    """When the pod last turned Ready, if it is Ready now."""
    if not is_ready(pod):
        return None
    ready = condition(pod, "Ready") or {}
    return epoch(ready.get("lastTransitionTime")) or epoch(
        (pod.get("status") or {}).get("startTime")
    )


def container_waiting_reason(pod: RawBody) -> str | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            reason: str = waiting["reason"]
            return reason
    return None


def running_since(pod: RawBody) -> float | None:
    """When the agent container (the template's first) last started running, if it runs now:
    a sidecar's start, which the kubelet may list first, says nothing of the agent's."""
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    agent = containers[0].get("name")
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if agent is not None and status.get("name") != agent:
            continue
        running = (status.get("state") or {}).get("running")
        if running is not None:
            return epoch(running.get("startedAt"))
    return None


def is_failed(pod: RawBody) -> bool:
    """The pod's agent is gone for good: the pod ended, or its container keeps crashing."""
    return is_terminal(pod) or container_waiting_reason(pod) == "CrashLoopBackOff"


def is_terminal(pod: RawBody) -> bool:
    """The pod ended (Failed or Succeeded): its processes are gone and will not restart."""
    return (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded")


def failed_at(pod: RawBody) -> float | None:
    """When the pod's agent container last terminated, if its status says."""
    ends = [
        epoch(((container.get(key) or {}).get("terminated") or {}).get("finishedAt"))
        for container in (pod.get("status") or {}).get("containerStatuses") or []
        for key in ("state", "lastState")
    ]
    return max((end for end in ends if end is not None), default=None)


#: The grace period Kubernetes gives a pod when neither its deletion nor its spec names one.
DEFAULT_GRACE_SECONDS = 30.0


def gone_by(pod: RawBody) -> float | None:
    """When a pod being deleted should be gone: its deletionTimestamp plus its deletion grace
    period (the API server already adds the grace to the stamp, the local one does not, so this
    errs late by one grace period at most). None while the pod is not being deleted."""
    meta = pod["metadata"]
    stamp = epoch(meta.get("deletionTimestamp"))
    if stamp is None:
        return None
    for grace in (
        meta.get("deletionGracePeriodSeconds"),
        (pod.get("spec") or {}).get("terminationGracePeriodSeconds"),
    ):
        if isinstance(grace, int | float):
            return stamp + grace
    return stamp + DEFAULT_GRACE_SECONDS


def is_unschedulable(pod: RawBody) -> bool:
    scheduled = condition(pod, "PodScheduled")
    return bool(
        scheduled
        and scheduled.get("status") == "False"
        and scheduled.get("reason") == "Unschedulable"
    )


def observe_pod(
    pod: RawBody,
    *,
    first_ready: float | None = None,
) -> ObservedAgent:
    """The pool core's view of one pod, from its manifest and status alone.

    ``first_ready`` is when the operator first saw the pod Ready, so a pod that turned unready
    is told apart from one that never was.
    """
    meta = pod["metadata"]
    status = pod.get("status") or {}
    spec = pod.get("spec") or {}
    ready = is_ready(pod)
    scheduled_cond = condition(pod, "PodScheduled")
    return ObservedAgent(
        name=meta["name"],
        created_at=epoch(meta.get("creationTimestamp")) or 0.0,
        scheduled=bool(spec.get("nodeName"))
        or bool(scheduled_cond and scheduled_cond.get("status") == "True"),
        ready=ready,
        ready_at=first_ready if first_ready is not None else ready_since(pod),
        failed=is_failed(pod),
        deleting=bool(meta.get("deletionTimestamp")),
        unschedulable=is_unschedulable(pod),
        waiting_reason=container_waiting_reason(pod),
        template_hash=(meta.get("annotations") or {}).get(TEMPLATE_HASH_ANNOTATION, ""),
        token_hash=(meta.get("annotations") or {}).get(TOKEN_HASH_ANNOTATION, ""),
        ip=status.get("podIP"),
        running_since=running_since(pod),
        gone_by=gone_by(pod),
    )


#: The most of a termination message's last line that the pool's Degraded condition repeats.
CAUSE_CHARACTERS = 240


@dataclass(frozen=True, slots=True)
class PodFailure:
    """Why one agent pod failed: its name, the reason (one CamelCase word) and a message."""

    pod: str
    reason: str
    message: str


def failure_of(pod: RawBody) -> PodFailure:
    """Why a failed pod failed, for the pool's Degraded condition.

    The pod's own reason wins (NoLocalCommand, Evicted); then the agent container's termination
    (a crash at start-up reads as CrashLoopBackOff, the word users know for it), with the last
    line of its termination message: under FallbackToLogsOnError the end of the agent's output,
    where a traceback names its exception.
    """
    name = str(pod["metadata"]["name"])
    status = pod.get("status") or {}
    if status.get("reason"):
        return PodFailure(
            name, str(status["reason"]), str(status.get("message") or status["reason"])
        )
    for container in status.get("containerStatuses") or []:
        for state in (container.get("state") or {}, container.get("lastState") or {}):
            terminated = state.get("terminated")
            if terminated:
                code = terminated.get("exitCode")
                detail = (
                    last_line(terminated.get("message")) or terminated.get("reason") or "exited"
                )
                message = f"agent {name} exited with code {code}: {detail}"
                return PodFailure(name, "CrashLoopBackOff", message)
        waiting = (container.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            reason = str(waiting["reason"])
            return PodFailure(name, reason, str(waiting.get("message") or reason))
    return PodFailure(name, "PodFailed", f"pod {name} failed")


def last_line(text: str | None) -> str:
    """The last line of text that is not blank, cut to CAUSE_CHARACTERS."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1]
    return line if len(line) <= CAUSE_CHARACTERS else line[: CAUSE_CHARACTERS - 1] + "…"
