"""How a run ends and what its status says: phase, result, message and conditions.

Pure functions of what the engine counted. A drained run succeeds unless items failed under the
``Fail`` policy; a deadlocked run (items remain, none can start) fails whatever the policy, since
work was left undone, with a message that names the cause; a source that cannot give items fails
the run. The engine calls :func:`end_now` whenever nothing is in flight; conditions are
stamped by :func:`agentpool.api.conditions.set_condition`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from agentpool.api import FailurePolicy, RunResult
from agentpool.api.conditions import set_condition
from agentpool.api.raw import RawCondition
from agentpool.api.reasons import ConditionType, Reason


@dataclass(frozen=True)
class RunEnd:
    """The end of a run, as status and Events report it."""

    phase: Literal["Succeeded", "Failed"]
    result: RunResult | None
    reason: str
    message: str


def decide_end(
    *,
    result: RunResult | None,
    policy: FailurePolicy,
    total: int,
    failed: int,
    not_started: int = 0,
    cause: str = "",
    source_error: str | None = None,
    source_reason: str = Reason.SOURCE_FAILED,
) -> RunEnd:
    """The phase and message of a finished run."""
    failed_text = f"{failed} of {total} items failed"
    if source_error is not None:
        return RunEnd("Failed", result, source_reason, source_error)
    if result == "Deadlocked":
        message = f"{not_started} of {total} items could not start: {cause}"
        if failed:
            message += f"; {failed_text}"
        return RunEnd("Failed", result, Reason.DEADLOCKED, message)
    if failed and policy == "Fail":
        return RunEnd("Failed", result, Reason.ITEMS_FAILED, failed_text)
    message = f"{total - failed} of {total} items succeeded"
    if failed:
        message += f"; {failed_text}"
    return RunEnd("Succeeded", result, Reason.DRAINED, message)


def end_now(
    *,
    policy: FailurePolicy,
    total: int,
    done: int,
    failed: int,
    drained: bool,
    suspended: bool,
    source_error: str | None = None,
    source_reason: str = Reason.SOURCE_FAILED,
    deadlock: str | None = None,
    missing: Iterable[str] = (),
) -> RunEnd | None:
    """How a run with nothing in flight ends, or None while it goes on.

    ``done`` items of ``total`` are recorded; ``drained``: no item is left to start; ``deadlock``:
    why a checkout found no agent with nothing running; ``missing``: why the items parked for
    missing pools cannot start, which deadlocks the run once the rest has drained.
    """
    cause: str | None = None
    if source_error is None:
        causes = sorted(set(missing))
        cause = deadlock if deadlock is not None or not (causes and drained) else "; ".join(causes)
        if cause is None and (suspended or not drained):
            return None
    result: RunResult | None = None
    if source_error is None:
        result = "Deadlocked" if cause is not None else "Drained"
    return decide_end(
        result=result,
        policy=policy,
        total=total,
        failed=failed,
        not_started=total - done,
        cause=cause or "",
        source_error=source_error,
        source_reason=source_reason,
    )


def running_conditions(
    conditions: Sequence[RawCondition],
    *,
    suspended: bool,
    now: float,
    waiting: tuple[str, str, float] | None = None,
) -> list[RawCondition]:
    """Conditions while a run goes on: neither Complete nor Failed; Suspended as it is;
    Waiting with ``waiting``'s reason and message while items cannot start for that, since the
    time it gives."""
    result = set_condition(
        conditions, ConditionType.COMPLETE, False, reason="Running", message="items remain", now=now
    )
    result = set_condition(
        result, ConditionType.FAILED, False, reason="Running", message="no failure yet", now=now
    )
    result = set_condition(
        result,
        ConditionType.SUSPENDED,
        suspended,
        reason=Reason.SUSPENDED if suspended else "Running",
        message="spec.suspend is true: nothing new is dispatched" if suspended else "dispatching",
        now=now,
    )
    reason, message, since = waiting or (Reason.RUNNING, "nothing to wait for", now)
    waits = waiting is not None
    return set_condition(
        result, ConditionType.WAITING, waits, reason=reason, message=message, now=since
    )


def final_conditions(
    conditions: Sequence[RawCondition], end: RunEnd, *, now: float
) -> list[RawCondition]:
    """Conditions of a finished run: Complete or Failed true, with the end's words."""
    succeeded = end.phase == "Succeeded"
    result = set_condition(
        conditions,
        ConditionType.COMPLETE,
        succeeded,
        reason=end.reason,
        message=end.message,
        now=now,
    )
    result = set_condition(
        result,
        ConditionType.FAILED,
        not succeeded,
        reason=end.reason,
        message=end.message,
        now=now,
    )
    result = set_condition(
        result, ConditionType.SUSPENDED, False, reason=end.reason, message="finished", now=now
    )
    return set_condition(
        result, ConditionType.WAITING, False, reason=end.reason, message="finished", now=now
    )
