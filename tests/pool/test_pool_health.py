"""What a pool remembers of its agents' troubles: start-up failures back off replacements and
name their pods in Degraded, quarantines back off, an agent that turned unready stays visible,
and agents answering outside the agent protocol make the pool Degraded until one answers in it."""

from __future__ import annotations

from typing import Any

import pytest

from agentpool.api.conditions import ConditionView
from agentpool.api.reasons import RetireReason
from agentpool.pool.health import (
    PoolHealth,
    degraded_trouble,
    kept_since,
    note_answer,
    note_retirement,
    note_start_failure,
    report_create_failure,
    with_trouble,
)
from agentpool.settings import PoolSettings

SETTINGS = PoolSettings()
CRASH_BACKOFF_MAX_SECONDS = SETTINGS.crash_backoff_max_seconds
UNREADY_MEMORY_SECONDS = SETTINGS.unready_memory_seconds
OUTSIDE_ANSWERS = SETTINGS.outside_protocol_answers
OUTSIDE_MEMORY_SECONDS = SETTINGS.outside_protocol_memory_seconds
NOW = 10_000.0


def _pod(name: str, phase: str = "Failed", finished: str | None = None) -> dict[str, Any]:
    terminated = {"exitCode": 1, "reason": "Error"}
    if finished is not None:
        terminated["finishedAt"] = finished
    return {
        "metadata": {"name": name},
        "status": {
            "phase": phase,
            "containerStatuses": [{"name": "agent", "state": {"terminated": terminated}}],
        },
    }


RUNNING = {"metadata": {"name": "ok"}, "status": {"phase": "Running"}}


@pytest.mark.parametrize(
    ("before", "pod", "ever_ready", "count", "until"),
    [
        # Not failed, or no pod: nothing to count.
        (PoolHealth(), None, False, 0, 0.0),
        (PoolHealth(), RUNNING, False, 0, 0.0),
        # A first failure waits one second, then two, four... up to the cap.
        (PoolHealth(), _pod("a"), False, 1, NOW + 1),
        (PoolHealth(crash_failures=2), _pod("a"), False, 3, NOW + 4),
        (PoolHealth(crash_failures=20), _pod("a"), False, 21, NOW + CRASH_BACKOFF_MAX_SECONDS),
        # An agent that was Ready once ends the run; the back-off set runs out by itself.
        (PoolHealth(crash_failures=3, crash_backoff_until=NOW + 4), _pod("a"), True, 0, NOW + 4),
        # A failure from before the loop began (an operator restart) was counted back then.
        (PoolHealth(), _pod("a", finished="1970-01-01T02:00:00Z"), False, 0, 0.0),
    ],
)
def test_start_failures_count_and_back_off(
    before: PoolHealth, pod: dict[str, Any] | None, ever_ready: bool, count: int, until: float
) -> None:
    """Agents failing before they ever turn Ready back replacements off as CrashLoopBackOff."""
    after = note_start_failure(
        before,
        pod,
        ever_ready=ever_ready,
        loop_started_at=NOW,
        now=NOW,
        backoff_cap=CRASH_BACKOFF_MAX_SECONDS,
    )
    assert (after.crash_failures, after.crash_backoff_until) == (count, until)


def test_start_failures_keep_the_latest_five_pods() -> None:
    """Degraded names the latest few failed pods, oldest first."""
    health = PoolHealth()
    for n in range(7):
        health = note_start_failure(
            health,
            _pod(f"p{n}"),
            ever_ready=False,
            loop_started_at=NOW,
            now=NOW,
            backoff_cap=CRASH_BACKOFF_MAX_SECONDS,
        )
    assert [failure.pod for failure in health.start_failures] == [f"p{n}" for n in range(2, 7)]
    assert health.agent_ready().start_failures == ()
    assert health.agent_ready().crash_backoff_until == health.crash_backoff_until


@pytest.mark.parametrize(
    ("reason", "unready", "quarantines"),
    [
        (str(RetireReason.UNREADY), ("a", NOW), 0),
        (str(RetireReason.QUARANTINED), None, 1),
        (str(RetireReason.IDLE_TIMEOUT), None, 0),
    ],
)
def test_retirements_remember_unready_and_quarantine(
    reason: str, unready: tuple[str, float] | None, quarantines: int
) -> None:
    """Readiness lost is remembered for Degraded; a quarantine backs replacements off."""
    after = note_retirement(PoolHealth(), "a", reason, NOW)
    assert after.last_unready == unready
    assert after.quarantine_backoff.failures == quarantines
    assert (after.creation_hold(NOW) > 0) is bool(quarantines)


@pytest.mark.parametrize(
    ("reason", "pod", "kept"),
    [
        (str(RetireReason.FAILED), _pod("a", finished="1970-01-01T02:46:40Z"), NOW),
        (str(RetireReason.FAILED), _pod("a"), NOW + 5),  # no time on the pod: now
        (
            str(RetireReason.FAILED),
            _pod("a", phase="Running"),
            None,
        ),  # crash-looping, still running: deleted
        (str(RetireReason.FAILED), None, None),
        (str(RetireReason.IDLE_TIMEOUT), _pod("a"), None),
    ],
)
def test_only_failed_ended_pods_are_kept(
    reason: str, pod: dict[str, Any] | None, kept: float | None
) -> None:
    """A failed pod whose processes ended stays for a post-mortem; every other goes at once."""
    assert kept_since(reason, pod, NOW + 5) == kept


HEALTHY = ConditionView("Degraded", "False", "AgentsHealthy", "fine")
READY = ConditionView("Ready", "True", "Ready", "ready")


@pytest.mark.parametrize(
    ("health", "at", "reason"),
    [
        (PoolHealth(), NOW, None),
        (PoolHealth(last_unready=("a", NOW)), NOW + 1, "ReadinessFailing"),
        (PoolHealth(last_unready=("a", NOW)), NOW + UNREADY_MEMORY_SECONDS, None),
        (
            note_start_failure(
                PoolHealth(last_unready=("a", NOW)),
                _pod("b"),
                ever_ready=False,
                loop_started_at=NOW,
                now=NOW,
                backoff_cap=CRASH_BACKOFF_MAX_SECONDS,
            ),
            NOW + 1,
            "CrashLoopBackOff",
        ),
    ],
)
def test_degraded_says_what_the_pool_remembers(
    health: PoolHealth, at: float, reason: str | None
) -> None:
    """Start-up failures come first, then readiness lost within the last minute; a Degraded
    that already says True is left as it is."""
    trouble = degraded_trouble(health, at, memory_seconds=UNREADY_MEMORY_SECONDS)
    assert (trouble.reason if trouble is not None else None) == reason
    conditions = with_trouble([READY, HEALTHY], trouble)
    assert conditions[0] == READY
    assert conditions[1] == (trouble or HEALTHY)
    degraded = ConditionView("Degraded", "True", "Other", "already")
    assert with_trouble([degraded], trouble) == [degraded]


def test_refused_creates_back_off_and_outrank_every_other_trouble() -> None:
    """A refused pod create holds creation by a doubling wait, is the Degraded reason even over
    agents failing at start, and a create that passes ends both at once."""
    health = PoolHealth(crash_failures=1, start_failures=()).create_failed("forbidden", NOW)
    health = health.create_failed("forbidden", NOW + 1)
    assert health.creation_hold(NOW + 1) == pytest.approx(2.0)
    trouble = degraded_trouble(health, NOW + 1, memory_seconds=UNREADY_MEMORY_SECONDS)
    assert trouble == ConditionView(
        "Degraded",
        "True",
        "CreateFailed",
        "The API server refused the agent pod (2 times in a row, backing off): forbidden. The "
        "pod is made from the pool's spec.image and spec.template: fix the field the server "
        "names there, or the quota or admission policy it names",
    )
    crashing = ConditionView("Degraded", "True", "CrashLoopBackOff", "agent a crashes")
    assert with_trouble([crashing], trouble) == [trouble]
    passed = health.create_passed()
    assert passed.creation_hold(NOW + 1) == 0
    assert passed.create_refusal is None


@pytest.mark.parametrize(
    ("failures", "reported"),
    [(0, False), (1, True), (2, True), (3, False), (4, True), (6, False), (64, True)],
)
def test_refusals_are_reported_on_the_back_offs_steps(failures: int, reported: bool) -> None:
    assert report_create_failure(failures) is reported


#: An answer to POST /invoke from a web server's 404 page, as the agent client words it.
PAGE = (
    "the agent at http://10.0.0.7:8080 answered POST /invoke with HTTP 404 outside the protocol "
    "(see the agent protocol: docs/reference/protocol.md): '<!DOCTYPE HTML>'"
)
# One answer each: outside the protocol (o), in it (i: an output or the protocol's own error).
ANSWERS = {"o": True, "i": False}


@pytest.mark.parametrize(
    ("answers", "at", "degraded"),
    [
        # Fewer than five in a row across the agents: a stray page is no verdict.
        ("oooo", NOW, False),
        ("ooooo", NOW, True),
        ("oooooooooo", NOW, True),
        # An answer in the protocol ends the run, whichever agent gave it; the next starts anew.
        ("oooooi", NOW, False),
        ("ooooioooo", NOW, False),
        ("iiiiiooooo", NOW, True),
        # No such answer for the memory's length: a pool fixed while idle turns healthy.
        ("ooooo", NOW + OUTSIDE_MEMORY_SECONDS - 1, True),
        ("ooooo", NOW + OUTSIDE_MEMORY_SECONDS, False),
    ],
)
def test_answers_outside_the_protocol_in_a_row_degrade_the_pool(
    answers: str, at: float, degraded: bool
) -> None:
    """Five answers outside the protocol in a row, from any of the pool's agents, mark the pool
    Degraded OutsideProtocol, saying what to do; one in the protocol ends the run, and without
    another for five minutes the condition clears by itself."""
    health = PoolHealth()
    for number, answer in enumerate(answers):
        agent = f"p-{number % 3}"
        health = note_answer(health, agent, outside=ANSWERS[answer], message=PAGE, now=NOW)
    trouble = degraded_trouble(
        health,
        at,
        memory_seconds=UNREADY_MEMORY_SECONDS,
        outside_threshold=OUTSIDE_ANSWERS,
        outside_memory_seconds=OUTSIDE_MEMORY_SECONDS,
    )
    if not degraded:
        assert trouble is None
        return
    assert trouble is not None
    assert (trouble.type, trouble.status, trouble.reason) == ("Degraded", "True", "OutsideProtocol")
    assert "POST /invoke" in trouble.message
    assert "docs/reference/protocol.md" in trouble.message
    assert "agent SDK" in trouble.message
    assert "spec.port" in trouble.message
    assert with_trouble([READY, HEALTHY], trouble) == [READY, trouble]


def test_agents_off_the_protocol_yield_to_agents_that_cannot_start() -> None:
    """Agents failing before they turn Ready say more than the answers of those that did, and
    the judgement is off with a threshold of 0."""
    health = PoolHealth()
    for _ in range(OUTSIDE_ANSWERS):
        health = note_answer(health, "p-0", outside=True, message=PAGE, now=NOW)
    crashing = note_start_failure(
        health,
        _pod("b"),
        ever_ready=False,
        loop_started_at=NOW,
        now=NOW,
        backoff_cap=CRASH_BACKOFF_MAX_SECONDS,
    )
    first = degraded_trouble(
        crashing,
        NOW,
        memory_seconds=UNREADY_MEMORY_SECONDS,
        outside_threshold=OUTSIDE_ANSWERS,
        outside_memory_seconds=OUTSIDE_MEMORY_SECONDS,
    )
    assert first is not None
    assert first.reason == "CrashLoopBackOff"
    off = degraded_trouble(
        health, NOW, memory_seconds=UNREADY_MEMORY_SECONDS, outside_memory_seconds=60.0
    )
    assert off is None
