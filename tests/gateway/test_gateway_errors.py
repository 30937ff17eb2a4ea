"""What each way of getting no output is answered with: its status, reason and Retry-After."""

from __future__ import annotations

import json

import pytest

from agentpool.gateway import errors, tls
from agentpool.pool.checkin import (
    CheckoutFailed,
    CheckoutTimedOut,
    PoolClosed,
    PoolNotFound,
    TooManyWaiters,
)


@pytest.mark.parametrize(
    ("failure", "status", "reason", "retry"),
    [
        (TooManyWaiters('pool "p" has 5 checkouts waiting'), 429, "TooManyWaiters", 2.0),
        (CheckoutTimedOut('pool "p" exhausted after 1s'), 503, "PoolExhausted", 2.0),
        (PoolClosed("p"), 404, "NotFound", None),
        (PoolClosed("p", "is no longer served: the operator is stopping"), 503, "Unavailable", 2.0),
        (PoolNotFound('AgentPool "p" not found'), 404, "NotFound", None),
    ],
)
def test_a_checkout_that_got_no_agent(
    failure: CheckoutFailed, status: int, reason: str, retry: float | None
) -> None:
    """A full line is 429 and an exhausted pool 503, both with Retry-After; a pool deleted is
    404, one no longer served here 503; the message is the broker's, as the body says it."""
    error = errors.from_checkout(failure, retry_after=2.0)
    assert (error.status, error.reason, error.retry_after) == (status, reason, retry)
    assert json.loads(error.body()) == {"error": {"reason": reason, "message": str(failure)}}


@pytest.mark.parametrize(
    ("reason", "status", "said"),
    [
        ("CallTimeout", 504, "CallTimeout"),
        ("HandlerError", 502, "HandlerError"),
        ("AgentLost", 502, "AgentLost"),
        ("Busy", 502, "Busy"),
        ("", 502, "BadResponse"),
    ],
)
def test_an_agent_that_failed_the_call(reason: str, status: int, said: str) -> None:
    """The agent's own reason, as a proxy answers for its upstream: 504 for no answer in time,
    502 for anything else."""
    error = errors.from_agent(reason, "what the agent said")
    assert (error.status, error.reason, error.message) == (status, said, "what the agent said")


def test_the_certificate_names_the_gateway_and_round_trips_through_its_secret() -> None:
    """Fresh material names the hosts and loopback, is read back from its Secret's data as it
    was written, and loads into a TLS context; a Secret missing a key or garbled is none."""
    material = tls.fresh(("agentpool-gateway.system.svc",))
    assert material.serves(("agentpool-gateway.system.svc", "localhost", "127.0.0.1"))
    assert not material.serves(("elsewhere.example",))
    assert tls.material_from(tls.secret_data(material)) == material
    material.context()
    assert tls.material_from({}) is None
    assert tls.material_from({"tls.crt": "not base64!", "tls.key": "eA=="}) is None
    without_ca = {k: v for k, v in tls.secret_data(material).items() if k != "ca.crt"}
    read = tls.material_from(without_ca)
    assert read is not None
    assert read.ca_pem == material.cert_pem
