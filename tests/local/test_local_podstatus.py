"""The pod status the local kubelet reports, computed as data: phases, conditions, back-off."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agentpool.local.kubelet import podstatus
from agentpool.local.kubelet.podstatus import PodObservation, Running, Terminated, Waiting

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def conditions(status: dict[str, object]) -> dict[str, dict[str, object]]:
    return {c["type"]: c for c in status["conditions"]}  # type: ignore[attr-defined, index]


def test_ready_only_when_running_and_probed_ready() -> None:
    """Ready and ContainersReady are True only for a running container whose probe passed."""
    base = PodObservation(container="agent", image="", state=Running(T0), phase="Running")
    not_ready = podstatus.render_status(base, previous={}, now=T0)
    assert conditions(not_ready)["Ready"]["status"] == "False"
    assert conditions(not_ready)["Ready"]["reason"] == "ContainersNotReady"
    ready = podstatus.render_status(
        PodObservation(**{**base.__dict__, "ready": True}), previous={}, now=T0
    )
    assert conditions(ready)["Ready"]["status"] == "True"
    assert conditions(ready)["ContainersReady"]["status"] == "True"
    assert ready["containerStatuses"][0]["ready"] is True
    waiting = podstatus.render_status(
        PodObservation(container="agent", image="", state=Waiting("X"), ready=True),
        previous={},
        now=T0,
    )
    assert conditions(waiting)["Ready"]["status"] == "False"


def test_transition_time_kept_until_status_changes() -> None:
    """lastTransitionTime moves only when a condition's status flips, as clients rely on."""
    running = PodObservation(container="a", image="", state=Running(T0), phase="Running")
    first = podstatus.render_status(running, previous={}, now=T0)
    later = T0 + timedelta(seconds=30)
    same = podstatus.render_status(running, previous=first, now=later)
    assert conditions(same)["Ready"]["lastTransitionTime"] == "2025-01-01T00:00:00Z"
    flipped = podstatus.render_status(
        PodObservation(**{**running.__dict__, "ready": True}), previous=first, now=later
    )
    assert conditions(flipped)["Ready"]["lastTransitionTime"] == "2025-01-01T00:00:30Z"
    assert conditions(flipped)["PodScheduled"]["lastTransitionTime"] == "2025-01-01T00:00:00Z"


def test_container_states_render_like_kubelet() -> None:
    """CrashLoopBackOff waits with the last termination in lastState; IPs and times are set."""
    crashed = Terminated(3, "Error", T0, T0 + timedelta(seconds=1))
    status = podstatus.render_status(
        PodObservation(
            container="a",
            image="img",
            state=Waiting("CrashLoopBackOff", "back-off 2s"),
            last_state=crashed,
            restart_count=2,
            phase="Running",
            pod_ip="127.0.0.5",
            start_time=T0,
        ),
        previous={},
        now=T0,
    )
    container = status["containerStatuses"][0]
    assert container["state"] == {
        "waiting": {"reason": "CrashLoopBackOff", "message": "back-off 2s"}
    }
    assert container["lastState"]["terminated"]["exitCode"] == 3
    assert container["restartCount"] == 2
    assert status["podIP"] == "127.0.0.5"
    assert status["hostIP"] == "127.0.0.1"
    assert status["startTime"] == "2025-01-01T00:00:00Z"


@pytest.mark.parametrize(
    ("policy", "code", "restarts"),
    [
        ("Always", 0, True),
        ("Always", 1, True),
        ("OnFailure", 0, False),
        ("OnFailure", 2, True),
        ("Never", 0, False),
        ("Never", 1, False),
    ],
)
def test_restart_policy(policy: str, code: int, restarts: bool) -> None:
    """restartPolicy decides whether an exited container starts again."""
    assert podstatus.restarts(policy, code) is restarts


def test_backoff_grows_and_is_capped() -> None:
    """CrashLoopBackOff doubles per restart and never exceeds its cap."""
    delays = [podstatus.backoff_delay(n, initial=1, cap=10) for n in range(1, 7)]
    assert delays == [1, 2, 4, 8, 10, 10]


def test_signal_deaths_use_container_exit_codes() -> None:
    """A process killed by SIGKILL reports 137, by SIGTERM 143, as containers do."""
    assert podstatus.exit_code_of(-9) == 137
    assert podstatus.exit_code_of(-15) == 143
    assert podstatus.exit_code_of(2) == 2
    assert podstatus.final_phase(0) == "Succeeded"
    assert podstatus.final_phase(1) == "Failed"


@pytest.mark.parametrize(
    ("resources", "qos"),
    [
        (None, "BestEffort"),
        ({"requests": {"cpu": "1"}}, "Burstable"),
        ({"limits": {"cpu": "1", "memory": "1Gi"}}, "Guaranteed"),
        ({"requests": {"cpu": "1"}, "limits": {"cpu": "2", "memory": "1Gi"}}, "Burstable"),
    ],
)
def test_qos_class_recorded(resources: dict[str, dict[str, str]] | None, qos: str) -> None:
    """Requests and limits are recorded as Kubernetes would classify them (never enforced)."""
    assert podstatus.qos_class(resources) == qos


def lines(count: int, *, width: int = 7) -> bytes:
    return b"".join(f"{n:0{width}d}\n".encode() for n in range(count))


@pytest.mark.parametrize(
    ("policy", "code", "output", "message"),
    [
        # An error exit under FallbackToLogsOnError takes the output's last 80 lines ...
        ("FallbackToLogsOnError", 1, b"loading\nno model\n", "loading\nno model\n"),
        ("FallbackToLogsOnError", 3, lines(100), lines(100)[-80 * 8 :].decode()),
        # ... of which at most the last 2048 bytes, as a real kubelet keeps them.
        ("FallbackToLogsOnError", 3, lines(80, width=99), lines(80, width=99)[-2048:].decode()),
        # Nothing to fall back on, no success, no such policy: no message.
        ("FallbackToLogsOnError", 1, b"", ""),
        ("FallbackToLogsOnError", 0, b"done\n", ""),
        ("File", 1, b"no model\n", ""),
    ],
)
def test_termination_message_falls_back_to_the_end_of_the_output(
    policy: str, code: int, output: bytes, message: str
) -> None:
    """With terminationMessagePolicy FallbackToLogsOnError, a container that exits with an error
    and wrote no termination message file (a local process has none) reports the end of its
    output as the termination message, as a real kubelet does."""
    tail = output[-podstatus.FALLBACK_LOG_BYTES :]
    terminated = Terminated(code, podstatus.terminated_reason(code), T0, T0)
    found = podstatus.with_termination_message(terminated, policy=policy, output_tail=tail)
    assert found.message == message


def test_termination_message_follows_the_kubelets_own() -> None:
    """A reason the kubelet gave (a failed liveness probe) comes first, the output after it."""
    killed = Terminated(137, "Error", T0, T0, message="Container failed liveness probe")
    found = podstatus.with_termination_message(
        killed, policy="FallbackToLogsOnError", output_tail=b"stuck\n"
    )
    assert found.message == "Container failed liveness probe: stuck\n"
