"""An agent continues the caller's trace: its handler runs in a span whose parent is the
``traceparent`` the call carried, the author's spans nest inside it, a handler's failure marks
it, and an agent without the OpenTelemetry API serves as before."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from opentelemetry.util._once import Once

from agentpool.agent import Agent, Context, traces
from agentpool.agent.server import AgentServer
from agentpool.agent.settings import Settings

TOKEN = "agent-traces-token"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


def _reset_provider() -> None:
    # The API lets a process set its provider once; each test starts from none, as a fresh
    # agent process does.
    trace._TRACER_PROVIDER_SET_ONCE = Once()  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]


@pytest.fixture
def exported() -> Iterator[InMemorySpanExporter]:
    """The author's set-up: a provider that keeps spans in memory."""
    _reset_provider()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    yield exporter
    provider.shutdown()
    _reset_provider()


def handle(item: Any, input: Any, context: Context) -> Any:
    with trace.get_tracer("author").start_as_current_span("author-step"):
        if item == "fail":
            raise RuntimeError("the model said no")
        return item


@contextlib.asynccontextmanager
async def _served(handler: Any) -> AsyncIterator[str]:
    started = asyncio.Event()

    async def startup() -> None:
        started.set()

    server = AgentServer(
        Agent(handler, startup=startup, name="traced"),
        Settings(host="127.0.0.1", port=0, token=TOKEN),
    )
    stop = asyncio.Event()
    serving = asyncio.create_task(server.serve_until(stop))
    try:
        async with asyncio.timeout(30):
            await started.wait()
        yield f"http://127.0.0.1:{server.port}"
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await serving


async def _invoke(base: str, item: Any, headers: dict[str, str]) -> int:
    envelope = {"id": "k1", "item": item, "input": None, "attempt": 2, "run": "r"}
    headers = {"Authorization": f"Bearer {TOKEN}", **headers}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{base}/invoke", json=envelope, headers=headers) as answer,
    ):
        await answer.read()
        return answer.status


def _named(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    (span,) = [span for span in spans if span.name == name]
    return span


@pytest.mark.parametrize("sync", [True, False], ids=["sync-handler", "async-handler"])
async def test_the_handler_runs_in_the_callers_trace(
    exported: InMemorySpanExporter, sync: bool
) -> None:
    """The item's span is the child of the caller's span named in ``traceparent``, and the
    author's span is the item span's child: one trace, whichever kind of handler."""

    async def async_handle(item: Any, input: Any, context: Context) -> Any:
        return handle(item, input, context)

    async with _served(handle if sync else async_handle) as base:
        assert await _invoke(base, "x", {"traceparent": TRACEPARENT}) == 200
    spans = list(exported.get_finished_spans())
    item, author = _named(spans, traces.ITEM_SPAN), _named(spans, "author-step")
    assert item.context is not None
    assert f"{item.context.trace_id:032x}" == TRACE_ID
    assert item.parent is not None
    assert f"{item.parent.span_id:016x}" == PARENT_ID
    assert item.parent.is_remote
    assert author.parent is not None
    assert author.parent.span_id == item.context.span_id
    assert dict(item.attributes or {}) == {
        "agentpool.agent.name": "traced",
        "agentpool.item.id": "k1",
        "agentpool.item.attempt": 2,
        "agentpool.run": "r",
    }
    assert item.status.status_code is StatusCode.UNSET


async def test_a_failing_handler_marks_the_item_span(exported: InMemorySpanExporter) -> None:
    """The author's exception fails the item (500) and marks its span as an error with the
    exception recorded, for the trace to show where it broke."""
    async with _served(handle) as base:
        assert await _invoke(base, "fail", {"traceparent": TRACEPARENT}) == 500
    item = _named(list(exported.get_finished_spans()), traces.ITEM_SPAN)
    assert item.status.status_code is StatusCode.ERROR
    assert "the model said no" in (item.status.description or "")
    assert [event.name for event in item.events] == ["exception"]


async def test_without_a_traceparent_the_item_starts_its_own_trace(
    exported: InMemorySpanExporter,
) -> None:
    """A call that carries no trace context (tracing off in the operator) still gets the
    author's spans nested in the item's, under a new trace."""
    async with _served(handle) as base:
        assert await _invoke(base, "x", {}) == 200
    spans = list(exported.get_finished_spans())
    item, author = _named(spans, traces.ITEM_SPAN), _named(spans, "author-step")
    assert item.parent is None
    assert item.context is not None
    assert author.parent is not None
    assert author.parent.span_id == item.context.span_id


async def test_an_agent_without_opentelemetry_serves_as_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tracing is optional in agents: without the API the headers are ignored and the item is
    served as ever."""
    monkeypatch.setattr(traces, "ENABLED", False)
    seen: list[bool] = []

    def plain(item: Any, input: Any, context: Context) -> Any:
        seen.append(trace.get_current_span().get_span_context().is_valid)
        return item

    async with _served(plain) as base:
        assert await _invoke(base, "x", {"traceparent": TRACEPARENT}) == 200
    assert seen == [False]
