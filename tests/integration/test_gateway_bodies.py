"""Any body a caller sends is answered, never with a 500 or a hang.

Hypothesis sends JSON of every shape, with the call's own fields given values of every type, to a
pool of echo agents: each is answered 200 (or 202 for a cast), or a 4xx whose error names a
reason; a 503 only for a call that would not wait or named its own checkout timeout, a 504 only
for one that named its own call timeout. Bytes that are not JSON get a 400.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from gateway_support import Gateway, caller_token
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from operator_support import Api
from test_gateway import ready_pool

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

FIELDS = ("item", "input", "id", "priority", "wait", "checkoutTimeoutSeconds", "callTimeoutSeconds")
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
bodies = st.one_of(
    json_values,
    st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=10), json_values, max_size=6),
)


@pytest.fixture(scope="module")
def echo(api: Api) -> tuple[Gateway, str, str]:
    namespace = api.new_namespace()
    pool = ready_pool(api, namespace, agents=2, checkoutTimeoutSeconds=30)
    token = caller_token(api, namespace, "caller", bound=True)
    return Gateway.of(api, namespace), pool, token


def _allowed(body: Any, status: int) -> bool:
    if status in (200, 202) or 400 <= status < 500:
        return True
    named = body if isinstance(body, dict) else {}
    if status == 503:
        return named.get("wait") is False or "checkoutTimeoutSeconds" in named
    return status == 504 and "callTimeoutSeconds" in named


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=bodies, verb=st.sampled_from(["call", "cast"]))
def test_any_json_body_is_answered_with_a_reason(
    echo: tuple[Gateway, str, str], body: Any, verb: str
) -> None:
    """Every JSON body is answered in time with its output, or with an error that names a
    reason; never a 500."""
    gateway, pool, token = echo
    reply = gateway.send(pool, body, token=token, verb=verb, timeout=60)
    assert _allowed(body, reply.status), (body, reply)
    if reply.status >= 400:
        assert isinstance(reply.reason, str), reply
        assert reply.reason, reply
    elif verb == "call":
        assert reply.body["output"] == json.loads(json.dumps(body))["item"]


@settings(max_examples=50, deadline=None)
@given(raw=st.binary(max_size=200))
def test_bytes_that_are_not_a_call_are_invalid(echo: tuple[Gateway, str, str], raw: bytes) -> None:
    """Bytes that are not a JSON object with an item get 400 Invalid, never a 500."""
    gateway, pool, token = echo
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and "item" in parsed:
        return
    reply = gateway.send(pool, None, token=token, raw=raw, timeout=60)
    assert (reply.status, reply.reason) == (400, "Invalid"), (raw, reply)
