"""A gateway call continues its caller's trace: the ``traceparent`` the caller sent is the parent
of the spans the call opens, and no value of it, however malformed, breaks the call."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.util._once import Once

from agentpool import tracing
from agentpool.api.gateway import GatewayRequest, GatewayVerb
from agentpool.gateway.access import Access
from agentpool.gateway.contracts import CallAnswer
from agentpool.gateway.http import Request
from agentpool.gateway.requests import EncodedItem
from agentpool.gateway.server import GatewayServer
from agentpool.settings import GatewaySettings

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


class Admitted:
    async def admit(self, authorization: str | None, **_: Any) -> str:
        return "caller"


class Calls:
    """Answers every call, noting the span context current while it is served."""

    def __init__(self) -> None:
        self.contexts: list[trace.SpanContext] = []

    async def serve(
        self,
        namespace: str,
        pool: str,
        request: GatewayRequest,
        item: EncodedItem,
        *,
        verb: GatewayVerb,
        answer: object = None,
    ) -> CallAnswer:
        self.contexts.append(trace.get_current_span().get_span_context())
        return CallAnswer(agent="agent-0", output="done")


def _reset_provider() -> None:
    # A process sets its provider once; each test starts from none, as a fresh one does.
    trace._TRACER_PROVIDER_SET_ONCE = Once()  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]
    tracing.TRACER._real_tracer = None  # type: ignore[attr-defined]


@pytest.fixture
def provider() -> Iterator[TracerProvider]:
    _reset_provider()
    installed = TracerProvider()
    trace.set_tracer_provider(installed)
    yield installed
    installed.shutdown()
    _reset_provider()


def _server(calls: Calls) -> GatewayServer:
    return GatewayServer(
        calls=calls, access=cast(Access, Admitted()), settings=GatewaySettings(), tls=None
    )


def _request(headers: dict[bytes, bytes]) -> Request:
    body = json.dumps({"item": "x"}).encode()
    return Request("POST", "/v1/namespaces/ns/agentpools/p/call", headers, body)


async def test_the_call_continues_the_callers_trace(provider: TracerProvider) -> None:
    """The caller's ``traceparent`` is current while the call is served, as the remote parent
    of the spans the operator opens for it."""
    calls = Calls()
    traceparent = f"00-{TRACE_ID}-{PARENT_ID}-01".encode()
    answer = await _server(calls)._respond(_request({b"traceparent": traceparent}))
    assert answer.status == 200
    (current,) = calls.contexts
    assert (f"{current.trace_id:032x}", f"{current.span_id:016x}") == (TRACE_ID, PARENT_ID)
    assert current.is_remote


async def test_with_traces_off_the_callers_header_is_ignored() -> None:
    """With no provider the operator takes up no trace context: nothing is current."""
    _reset_provider()
    calls = Calls()
    traceparent = f"00-{TRACE_ID}-{PARENT_ID}-01".encode()
    answer = await _server(calls)._respond(_request({b"traceparent": traceparent}))
    assert answer.status == 200
    assert not calls.contexts[0].is_valid


@given(traceparent=st.binary(max_size=80), tracestate=st.binary(max_size=80))
@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
async def test_no_trace_header_breaks_a_call(
    provider: TracerProvider, traceparent: bytes, tracestate: bytes
) -> None:
    """Whatever the caller sends as trace context, the call is served; a context that is not
    W3C trace context is dropped rather than half-taken."""
    calls = Calls()
    headers = {b"traceparent": traceparent, b"tracestate": tracestate}
    answer = await _server(calls)._respond(_request(headers))
    assert answer.status == 200
    (current,) = calls.contexts
    if current.is_valid:
        assert f"{current.trace_id:032x}" in traceparent.decode("latin-1").lower()
