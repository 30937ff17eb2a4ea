"""What a forwarded request becomes: the agent's target, the headers passed on either way, and the
gateway's own headers read or refused naming the header."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentpool.gateway.errors import GatewayError
from agentpool.gateway.forwarding import (
    Route,
    forwarded,
    is_forward,
    passed_back,
    passed_on,
    route,
)

BASE = "/v1/namespaces/team/agentpools/chat/proxy"


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (f"{BASE}/v1/chat/completions", ("team", "chat", "/v1/chat/completions")),
        (f"{BASE}/mcp?session=1&x=%2F", ("team", "chat", "/mcp?session=1&x=%2F")),
        (f"{BASE}/a//b/", ("team", "chat", "/a//b/")),
        (BASE, ("team", "chat", "/")),
        (f"{BASE}/", ("team", "chat", "/")),
        (f"{BASE}?q=1", ("team", "chat", "/?q=1")),
        ("/v1/namespaces/team/agentpools/chat/call", None),
        ("/v1/namespaces/team/agentpools/chat/proxyx/a", None),
        ("/v1/namespaces//agentpools/chat/proxy/a", None),
        ("/v1/namespaces/team/agentruns/chat/proxy/a", None),
        ("/v2/namespaces/team/agentpools/chat/proxy/a", None),
    ],
)
def test_the_agent_gets_the_path_after_proxy_with_the_query_as_sent(
    target: str, expected: tuple[str, str, str] | None
) -> None:
    found = route(target)
    assert (found and (found.namespace, found.name, found.target)) == expected
    assert found is None or found.kind == "agentpools"
    assert is_forward(target.encode()) == (expected is not None or "//agentpools" in target)


def test_a_lease_s_agent_is_reached_by_the_lease_s_name() -> None:
    target = "/v1/namespaces/team/agentleases/chat-1/proxy/v1/models?x=1"
    assert route(target) == Route("team", "agentleases", "chat-1", "/v1/models?x=1")
    assert is_forward(target.encode())


@given(st.binary(max_size=200))
def test_any_target_is_routed_or_not_never_raises(target: bytes) -> None:
    text = target.decode("latin-1")
    found = route(text)
    if found is not None:
        assert is_forward(target)
        assert found.target.startswith("/")


def test_the_connection_s_headers_and_the_caller_s_credentials_stay_behind() -> None:
    sent = [
        (b"Authorization", b"Bearer caller-token"),
        (b"Host", b"gateway:8443"),
        (b"Connection", b"keep-alive, X-Hop"),
        (b"X-Hop", b"1"),
        (b"Transfer-Encoding", b"chunked"),
        (b"Expect", b"100-continue"),
        (b"Agentpool-Priority", b"5"),
        (b"Content-Type", b"application/json"),
        (b"Mcp-Session-Id", b"abc"),
        (b"Accept", b"text/event-stream"),
        (b"Accept", b"application/json"),
    ]
    assert passed_on(sent) == (
        ("Content-Type", "application/json"),
        ("Mcp-Session-Id", "abc"),
        ("Accept", "text/event-stream"),
        ("Accept", "application/json"),
    )
    answered = [
        (b"Content-Type", b"text/event-stream"),
        (b"Transfer-Encoding", b"chunked"),
        (b"Keep-Alive", b"timeout=5"),
        (b"Set-Cookie", b"a=1"),
        (b"Set-Cookie", b"b=2"),
        (b"Agentpool-Agent", b"someone-else"),
        (b"Content-Length", b"12"),
    ]
    assert passed_back(answered) == [
        ("Content-Type", "text/event-stream"),
        ("Set-Cookie", "a=1"),
        ("Set-Cookie", "b=2"),
        ("Content-Length", "12"),
    ]


def test_the_gateway_s_own_headers_are_read() -> None:
    request = forwarded(
        "POST",
        "/x",
        [
            (b"agentpool-priority", b"-3"),
            (b"Agentpool-Wait", b"False"),
            (b"Agentpool-Checkout-Timeout", b"2.5"),
            (b"Agentpool-Call-Timeout", b"30"),
        ],
        None,
    )
    assert (request.priority, request.wait) == (-3, False)
    assert (request.checkout_timeout_seconds, request.call_timeout_seconds) == (2.5, 30.0)
    assert request.headers == ()
    default = forwarded("GET", "/", [], None)
    assert (default.priority, default.wait, default.call_timeout_seconds) == (0, True, None)


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("Agentpool-Priority", "high"),
        ("Agentpool-Wait", "yes"),
        ("Agentpool-Checkout-Timeout", "0"),
        ("Agentpool-Checkout-Timeout", "nan"),
        ("Agentpool-Call-Timeout", "inf"),
        ("Agentpool-Call-Timeout", "-1"),
        ("Agentpool-Call-Timeout", "86401"),
    ],
)
def test_a_bad_header_of_the_gateway_is_a_400_naming_it(header: str, value: str) -> None:
    with pytest.raises(GatewayError) as refused:
        forwarded("GET", "/", [(header.encode(), value.encode())], None)
    assert refused.value.status == 400
    assert refused.value.message.startswith(f"{header}: ")
    assert repr(value) in refused.value.message


def test_only_a_request_with_a_body_passes_one_on() -> None:
    async def body() -> AsyncIterator[bytes]:
        yield b"{}"

    stream = body()
    assert forwarded("GET", "/", [(b"Host", b"x")], stream).body is None
    assert forwarded("POST", "/", [(b"Content-Length", b"0")], stream).body is None
    assert forwarded("POST", "/", [(b"Content-Length", b"2")], stream).body is stream
    assert forwarded("POST", "/", [(b"Transfer-Encoding", b"chunked")], stream).body is stream
