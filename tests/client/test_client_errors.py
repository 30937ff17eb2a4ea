"""The client's errors say what the operator or the agent said, typed by what a program does next.

Tables over the statuses a lease and a run can end in, and the answers an agent can give.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentpool.api import AgentLeaseStatus, Condition, PoolRunStatus
from agentpool.client import CallFailed, LeaseFailed, PoolExhausted
from agentpool.client.agents import output_of
from agentpool.client.errors import lease_error, run_error
from agentpool.client.leases import bind_timeout_of


@pytest.mark.parametrize(
    ("phase", "reason", "kind"),
    [
        (None, None, None),
        ("Pending", "Waiting", None),
        ("Bound", "Bound", None),
        ("Failed", "PoolFull", PoolExhausted),
        ("Failed", "CheckoutTimeout", PoolExhausted),
        ("Failed", "PoolNotFound", LeaseFailed),
        ("Failed", "AgentLost", LeaseFailed),
        ("Failed", "BindUnsupported", LeaseFailed),
        ("Expired", "Expired", LeaseFailed),
        ("Released", "Released", LeaseFailed),
    ],
)
def test_a_lease_status_means_an_error_of_its_kind(
    phase: str | None, reason: str | None, kind: type[Exception] | None
) -> None:
    """No agent to be had is PoolExhausted (a program retries later or elsewhere); anything
    else that ends a lease is LeaseFailed; each keeps the operator's reason and message."""
    status = AgentLeaseStatus.model_validate(
        {"phase": phase, "reason": reason, "message": "said so"}
    )
    error = lease_error(status)
    if kind is None:
        assert error is None
        return
    assert type(error) is kind
    assert error is not None
    assert (error.reason, error.message) == (reason, "said so")


def test_a_failed_run_raises_its_failed_conditions_reason() -> None:
    failed = Condition(type="Failed", status="True", reason="Deadlocked", message="no agent")
    status = PoolRunStatus(phase="Failed", message="pool p has no agent", conditions=[failed])
    error = run_error(status)
    assert error is not None
    assert (error.reason, error.message, error.status) == (
        "Deadlocked",
        "pool p has no agent",
        status,
    )
    assert run_error(PoolRunStatus(phase="Succeeded")) is None
    assert run_error(PoolRunStatus(phase="Running")) is None


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (500, b'{"error": {"reason": "HandlerError", "message": "KeyError: n"}}', "HandlerError"),
        (409, b'{"error": {"reason": "Busy", "message": "one at a time"}}', "Busy"),
        (401, b'{"error": {"reason": "Unauthorized", "message": "no"}}', "Unauthorized"),
        (200, b'{"result": 1}', "BadResponse"),
        (502, b"<html>bad gateway</html>", "BadResponse"),
    ],
)
def test_an_agents_failed_answer_is_a_CallFailed_with_its_reason(
    status: int, body: bytes, reason: str
) -> None:
    with pytest.raises(CallFailed) as failed:
        output_of("http://10.0.0.1:8080", status, body)
    assert failed.value.reason == reason
    if reason == "BadResponse":
        # Which request got the stray answer, and where the protocol it should speak is.
        assert f"POST /invoke with HTTP {status}" in str(failed.value)
        assert "docs/reference/protocol.md" in str(failed.value)


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(), st.lists))
def test_any_output_comes_back_as_sent(output: object) -> None:
    assert output_of("http://a:1", 200, json.dumps({"output": output}).encode()) == output


@given(st.binary(max_size=200), st.integers(100, 599))
def test_no_answer_breaks_the_parser(body: bytes, status: int) -> None:
    """Whatever an agent answers, the client returns an output or raises CallFailed."""
    try:
        output_of("http://a:1", status, body)
    except CallFailed as failed:
        said = failed.reason
    else:
        said = "output"
    assert said


@pytest.mark.parametrize(
    ("checkout", "expected"), [(None, 120.0), (1, 31.0), (0.2, 31.0), (600, 630.0)]
)
def test_the_bind_wait_outlasts_the_checkout_timeout(
    checkout: float | None, expected: float
) -> None:
    """The client waits for the operator's verdict past the checkout timeout it asked for."""
    assert bind_timeout_of(checkout, default=120.0, grace=30.0) == expected
