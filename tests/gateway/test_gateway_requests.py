"""A call's body, read at the edge: what is taken, what is refused and how it is worded, and the
envelope the agent gets."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentpool.gateway.errors import GatewayError
from agentpool.gateway.requests import envelope, parse_request
from agentpool.wire.envelopes import parse_envelope


def refusal(raw: bytes) -> str:
    with pytest.raises(GatewayError) as refused:
        parse_request(raw)
    assert (refused.value.status, refused.value.reason) == (400, "Invalid")
    return refused.value.message


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"", "not JSON"),
        (b"{", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b'{"item": NaN}', "NaN is not JSON"),
        (b'{"item": Infinity}', "Infinity is not JSON"),
        (b"[1, 2]", 'JSON object with an "item"'),
        (b'"text"', 'JSON object with an "item"'),
        (b"{}", "item: required"),
        (b'{"item": 1, "priorty": 2}', "priorty: unknown field (a call takes item, input"),
        (b'{"item": 1, "call_timeout_seconds": 2}', "call_timeout_seconds: unknown field"),
        (b'{"item": 1, "priority": "2"}', "priority: input should be a valid integer"),
        (b'{"item": 1, "priority": 2.0}', "priority: input should be a valid integer"),
        (b'{"item": 1, "priority": true}', "priority: input should be a valid integer"),
        (b'{"item": 1, "wait": "false"}', "wait: input should be a valid boolean"),
        (b'{"item": 1, "checkoutTimeoutSeconds": 0}', "checkoutTimeoutSeconds: input should"),
        (b'{"item": 1, "callTimeoutSeconds": -1}', "callTimeoutSeconds: input should"),
        (b'{"item": 1, "callTimeoutSeconds": 1e9}', "callTimeoutSeconds: input should"),
        (b'{"item": 1, "id": ""}', "id: string should have at least 1 character"),
        (b'{"item": 1, "id": 7}', "id: input should be a valid string"),
        (b"[" * 100_000, "not JSON"),
    ],
)
def test_a_body_that_is_not_a_call_is_refused_naming_what_is_wrong(body: bytes, words: str) -> None:
    """Each problem is one 400 that names the field in the wire's own camelCase words."""
    assert words in refusal(body)


def test_a_call_takes_the_wire_names_and_leaves_the_rest_to_the_pool() -> None:
    """The fields a call names are taken as given; those it leaves out are None, so the pool's
    spec decides them."""
    request = parse_request(
        b'{"item": {"q": 1}, "input": [1], "id": "a", "priority": -3, "wait": false,'
        b' "checkoutTimeoutSeconds": 2.5, "callTimeoutSeconds": 9}'
    )
    assert (request.item, request.input, request.id, request.priority) == ({"q": 1}, [1], "a", -3)
    assert (request.wait, request.checkout_timeout_seconds, request.call_timeout_seconds) == (
        False,
        2.5,
        9.0,
    )
    plain = parse_request(b'{"item": null}')
    assert (plain.item, plain.wait, plain.checkout_timeout_seconds) == (None, True, None)


def test_a_number_json_cannot_carry_is_refused_before_any_agent() -> None:
    """A number read as infinity (1e400) is not sent to an agent as invalid JSON."""
    with pytest.raises(GatewayError) as refused:
        envelope(parse_request(b'{"item": 1e400}'))
    assert refused.value.status == 400
    assert "cannot be sent as JSON" in refused.value.message


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=20,
)


@given(item=json_values, input=json_values, named=st.one_of(st.none(), st.text(min_size=1)))
def test_the_agent_gets_the_protocols_envelope(item: Any, input: Any, named: str | None) -> None:
    """Whatever the item, the agent reads back the same item, input and id as attempt 1 of no
    run; an id the caller leaves out is one the gateway names, never two alike."""
    body: dict[str, Any] = {"item": item, "input": input}
    if named is not None:
        body["id"] = named
    request = parse_request(json.dumps(body).encode())
    sent = envelope(request)
    got = parse_envelope(sent.body)
    assert not isinstance(got, str), got
    assert (got.item, got.input, got.attempt, got.run) == (
        json.loads(json.dumps(item)),
        json.loads(json.dumps(input)),
        1,
        None,
    )
    assert got.id == sent.id
    if named is not None:
        assert sent.id == named
    else:
        assert sent.id != envelope(request).id
