"""Traces: a gateway call and a run's item each make one trace, from the operator's span down to
the agent's handler and the spans its author opens there; with no ``OTEL_*`` configuration the
operator installs no provider, exports nothing and sends the agent no trace context."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

from agentpool import tracing
from agentpool.agent import Agent, Context
from agentpool.agent.server import AgentServer
from agentpool.agent.settings import Settings
from agentpool.api import PoolRunSpec
from agentpool.api.gateway import GatewayRequest
from agentpool.broker import Broker
from agentpool.client.cluster import Cluster
from agentpool.client.gateway import GatewayCaller
from agentpool.gateway.access import Access
from agentpool.gateway.errors import GatewayError
from agentpool.gateway.requests import envelope
from agentpool.gateway.server import GatewayServer
from agentpool.handlers.dispatch import BrokerDispatcher
from agentpool.handlers.gateway import GatewayCalls
from agentpool.handlers.runtime import PoolHandle, Runtime
from agentpool.io.agents import AgentClient
from agentpool.io.kube import Kube
from agentpool.pool import ObservedAgent, PoolPolicy
from agentpool.pool.checkin import CheckinOutcome
from agentpool.runs.config import config_from_spec
from agentpool.runs.engine import RunEngine
from agentpool.runs.sources import inline_source
from agentpool.settings import GatewaySettings

TOKEN = "pool-token-traces"
AUTHOR_SPAN = "summarise"


@dataclass
class Seen:
    """What the agent saw of each item: its trace headers, and whether a span was current."""

    headers: list[dict[str, str]] = field(default_factory=list)
    recording: list[bool] = field(default_factory=list)


def _reset_provider() -> None:
    # The API lets a process set its provider once; each test here starts from none, as a
    # fresh process does (OpenTelemetry's own test utilities reset the same two globals).
    trace._TRACER_PROVIDER_SET_ONCE = Once()  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]
    # The operator's proxy tracer keeps the tracer of the first provider it met.
    tracing.TRACER._real_tracer = None  # type: ignore[attr-defined]


@pytest.fixture
def no_provider() -> Iterator[None]:
    _reset_provider()
    yield
    _reset_provider()


@pytest.fixture
def exported(no_provider: None) -> Iterator[InMemorySpanExporter]:
    """Spans go to memory, through a provider installed as an operator's would be."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    yield exporter
    provider.shutdown()


def _handler(seen: Seen, *, sync: bool) -> Any:
    def work(item: Any, context: Context) -> Any:
        # The author's own span, opened as any OpenTelemetry program opens one.
        seen.recording.append(trace.get_current_span().is_recording())
        with trace.get_tracer("author").start_as_current_span(AUTHOR_SPAN):
            if item == "fail":
                raise RuntimeError("the model refused")
            return {"echo": item}

    if sync:
        return lambda item, input, context: work(item, context)

    async def handler(item: Any, input: Any, context: Context) -> Any:
        return work(item, context)

    return handler


@dataclass
class Pool:
    runtime: Runtime
    seen: Seen


@contextlib.asynccontextmanager
async def _pool(*, sync: bool = False) -> AsyncIterator[Pool]:
    """One agent, served in this process, in pool ``p`` of namespace ``ns``."""
    seen = Seen()
    settings = Settings(host="127.0.0.1", port=0, token=TOKEN)
    started = asyncio.Event()

    async def startup() -> None:
        started.set()

    server = AgentServer(Agent(_handler(seen, sync=sync), startup=startup, name="traced"), settings)
    invoke = server._invoke

    async def spy(request: Any) -> Any:
        seen.headers.append({k.lower(): v for k, v in request.headers.items()})
        return await invoke(request)

    server._invoke = spy  # type: ignore[method-assign]
    stop = asyncio.Event()
    serving = asyncio.create_task(server.serve_until(stop))
    try:
        async with asyncio.timeout(30):
            await started.wait()
        assert server.port is not None
        broker = Broker("p", PoolPolicy(port=server.port), clock=lambda: 100.0)
        broker.update_agents(
            [
                ObservedAgent(
                    name="agent-0", created_at=0.0, ready=True, ready_at=1.0, ip="127.0.0.1"
                )
            ]
        )
        async with AgentClient() as agents:
            runtime = Runtime(kube=cast(Kube, None), agents=agents)
            runtime.pools[("ns", "p")] = PoolHandle(
                namespace="ns",
                name="p",
                broker=broker,
                port=server.port,
                wake=asyncio.Event(),
                token=TOKEN,
            )
            yield Pool(runtime, seen)
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await serving


class NullSink:
    async def write(self, patch: dict[str, Any]) -> None:
        return None

    async def write_results_configmap(self, name: str, data: dict[str, str]) -> None:
        return None

    async def event(self, type: str, reason: str, message: str) -> None:
        return None


async def _run(runtime: Runtime, count: int) -> None:
    work = [{"id": f"i{index}"} for index in range(count)]
    spec = {"poolRef": {"name": "p"}, "source": {"items": work}, "cap": 1, "itemId": "id"}
    engine = RunEngine(
        config_from_spec("r", PoolRunSpec.model_validate(spec), pools={}),
        source=inline_source(work),
        dispatcher=BrokerDispatcher(runtime, "ns"),
        sink=NullSink(),
    )
    async with asyncio.timeout(60):
        end = await engine.run()
    assert end.result == "Drained"


def _one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    named = [span for span in spans if span.name == name]
    assert len(named) == 1, f"{name}: {[span.name for span in spans]}"
    return named[0]


def _parent_of(child: ReadableSpan, parent: ReadableSpan) -> bool:
    assert child.parent is not None, f"{child.name} has no parent"
    assert parent.context is not None
    return child.parent.span_id == parent.context.span_id


def _checked_out_at_once(span: ReadableSpan) -> None:
    """The span's checkout event: a warm agent, got without waiting for a scale-up."""
    (event,) = [event for event in span.events if event.name == tracing.CHECKOUT_EVENT]
    attributes = dict(event.attributes or {})
    assert attributes[tracing.AGENT] == "agent-0"
    assert attributes[tracing.CHECKOUT_KIND] == "warm"
    assert 0 <= float(cast(float, attributes[tracing.WAIT_SECONDS])) < 30


async def test_a_gateway_call_is_one_trace_down_to_the_authors_span(
    exported: InMemorySpanExporter,
) -> None:
    """The gateway's span notes the checkout and holds the agent call; the agent's item span is the
    call's child through the ``traceparent`` header, and the author's span is inside it."""
    async with _pool() as pool:
        request = GatewayRequest.model_validate({"item": "hello", "id": "call-1"})
        answer = await GatewayCalls(pool.runtime).serve(
            "ns", "p", request, envelope(request), verb="call"
        )
    assert answer.output == {"echo": "hello"}
    spans = list(exported.get_finished_spans())
    call = _one(spans, tracing.GATEWAY_CALL_SPAN)
    invoke = _one(spans, tracing.AGENT_CALL_SPAN)
    handled = _one(spans, "agentpool.agent.item")
    author = _one(spans, AUTHOR_SPAN)
    assert len({span.context.trace_id for span in spans if span.context}) == 1
    assert call.parent is None
    assert _parent_of(invoke, call)
    assert _parent_of(handled, invoke)
    assert _parent_of(author, handled)
    assert handled.parent is not None
    assert handled.parent.is_remote
    assert dict(call.attributes or {}) == {
        tracing.NAMESPACE: "ns",
        tracing.POOL: "p",
        tracing.VERB: "call",
        tracing.ITEM_ID: "call-1",
        tracing.OUTCOME: tracing.SUCCEEDED,
        tracing.AGENT: "agent-0",
    }
    _checked_out_at_once(call)
    assert (invoke.attributes or {})[tracing.OUTCOME] == tracing.SUCCEEDED
    (headers,) = pool.seen.headers
    assert invoke.context is not None
    version, trace_id, parent_id, flags = headers["traceparent"].split("-")
    assert (version, trace_id, parent_id) == (
        "00",
        f"{invoke.context.trace_id:032x}",
        f"{invoke.context.span_id:016x}",
    )
    assert int(flags, 16) & 1, "the trace goes on sampled"


class Admitted:
    """The gateway's door, open to every caller (the reviews are tested elsewhere)."""

    async def admit(self, authorization: str | None, **_: Any) -> str:
        return "caller"


@dataclass
class Namespace:
    namespace: str = "ns"


async def test_a_programs_trace_runs_through_the_client_and_gateway_to_the_agent(
    exported: InMemorySpanExporter,
) -> None:
    """A program that traces its work calls a pool with the Python client: the gateway's span
    hangs from the program's span, and the agent's and the author's spans from the gateway's,
    all in the program's one trace."""
    async with _pool() as pool:
        server = GatewayServer(
            calls=GatewayCalls(pool.runtime),
            access=cast(Access, Admitted()),
            settings=GatewaySettings(),
            tls=None,
        )
        await server.start("127.0.0.1", 0)
        caller = GatewayCaller(cast(Cluster, Namespace()), url=server.url, token="caller-token")
        try:
            with trace.get_tracer("program").start_as_current_span("program-request"):
                request = GatewayRequest.model_validate({"item": "hi"})
                output = await caller.send("p", request, verb="call", timeout=30)
        finally:
            await caller.close()
            await server.stop()
    assert output == {"echo": "hi"}
    spans = list(exported.get_finished_spans())
    program = _one(spans, "program-request")
    call = _one(spans, tracing.GATEWAY_CALL_SPAN)
    invoke = _one(spans, tracing.AGENT_CALL_SPAN)
    handled = _one(spans, "agentpool.agent.item")
    author = _one(spans, AUTHOR_SPAN)
    assert len(spans) == 5
    assert len({span.context.trace_id for span in spans if span.context}) == 1
    assert _parent_of(call, program)
    assert call.parent is not None
    assert call.parent.is_remote
    assert _parent_of(invoke, call)
    assert _parent_of(handled, invoke)
    assert _parent_of(author, handled)


async def test_a_failed_call_says_why_on_every_span(exported: InMemorySpanExporter) -> None:
    """A handler that raises fails the gateway call: the call's span and the agent call's span
    carry the outcome HandlerError and an error status, and the agent's span the exception."""
    async with _pool() as pool:
        request = GatewayRequest.model_validate({"item": "fail"})
        with pytest.raises(GatewayError):
            await GatewayCalls(pool.runtime).serve(
                "ns", "p", request, envelope(request), verb="call"
            )
    spans = list(exported.get_finished_spans())
    for name in (tracing.GATEWAY_CALL_SPAN, tracing.AGENT_CALL_SPAN):
        span = _one(spans, name)
        assert (span.attributes or {})[tracing.OUTCOME] == "HandlerError"
        assert span.status.status_code is trace.StatusCode.ERROR
    handled = _one(spans, "agentpool.agent.item")
    assert handled.status.status_code is trace.StatusCode.ERROR
    assert "the model refused" in (handled.status.description or "")


async def test_a_call_that_finds_no_agent_says_so_on_its_span(
    exported: InMemorySpanExporter,
) -> None:
    """A call that will not wait, on a pool whose one agent is busy, ends PoolExhausted: its
    span's checkout event says so, and no agent is called."""
    async with _pool() as pool:
        handle = pool.runtime.pools.get(("ns", "p"))
        assert handle is not None
        broker = handle.broker
        held = await broker.checkout(timeout=1, priority=0, holder="other")
        request = GatewayRequest.model_validate({"item": "x", "wait": False})
        with pytest.raises(GatewayError) as raised:
            await GatewayCalls(pool.runtime).serve(
                "ns", "p", request, envelope(request), verb="call"
            )
        broker.checkin(held, CheckinOutcome.SUCCESS)
    assert raised.value.reason == "PoolExhausted"
    (call,) = exported.get_finished_spans()
    assert call.name == tracing.GATEWAY_CALL_SPAN
    assert (call.attributes or {})[tracing.OUTCOME] == "PoolExhausted"
    (event,) = [event for event in call.events if event.name == tracing.CHECKOUT_EVENT]
    assert (event.attributes or {})[tracing.OUTCOME] == "PoolExhausted"
    assert pool.seen.headers == []


@pytest.mark.parametrize("sync", [False, True], ids=["async-handler", "sync-handler"])
async def test_each_item_of_a_run_is_one_trace_down_to_the_authors_span(
    exported: InMemorySpanExporter, sync: bool
) -> None:
    """A run of three items makes three traces, each an item span with its run, pool,
    namespace, index, agent, outcome and checkout, over the agent call, over the agent's
    item span and the author's span: a sync handler, on the agent's worker thread, joins too."""
    async with _pool(sync=sync) as pool:
        await _run(pool.runtime, 3)
    spans = list(exported.get_finished_spans())
    items = [span for span in spans if span.name == tracing.RUN_ITEM_SPAN]
    assert sorted((span.attributes or {})[tracing.ITEM_INDEX] for span in items) == [0, 1, 2]
    for item in items:
        assert item.context is not None
        mine = [s for s in spans if s.context and s.context.trace_id == item.context.trace_id]
        invoke = _one(mine, tracing.AGENT_CALL_SPAN)
        handled = _one(mine, "agentpool.agent.item")
        author = _one(mine, AUTHOR_SPAN)
        assert len(mine) == 4
        assert item.parent is None
        _checked_out_at_once(item)
        assert _parent_of(invoke, item)
        assert _parent_of(handled, invoke)
        assert _parent_of(author, handled)
        attributes = dict(item.attributes or {})
        index = attributes.pop(tracing.ITEM_INDEX)
        assert attributes == {
            tracing.RUN: "r",
            tracing.POOL: "p",
            tracing.NAMESPACE: "ns",
            tracing.ITEM_ID: f"i{index}",
            tracing.ATTEMPT: 1,
            tracing.AGENT: "agent-0",
            tracing.OUTCOME: tracing.SUCCEEDED,
        }
        assert (handled.attributes or {})["agentpool.item.id"] == f"i{index}"
    assert pool.seen.recording == [True, True, True]


async def test_with_no_configuration_nothing_is_installed_sent_or_exported(
    no_provider: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no ``OTEL_*`` variable the operator installs no provider: the API's no-op remains,
    the agent gets no ``traceparent``, and neither side's handler span records anything."""
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    assert tracing.install() is None
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    async with _pool() as pool:
        await _run(pool.runtime, 2)
        request = GatewayRequest.model_validate({"item": "hello"})
        await GatewayCalls(pool.runtime).serve("ns", "p", request, envelope(request), verb="call")
    assert len(pool.seen.headers) == 3
    assert not any("traceparent" in headers for headers in pool.seen.headers)
    assert pool.seen.recording == [False, False, False]
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
