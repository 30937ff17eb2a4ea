"""Traces from the operator as deployed: ``agentpool run`` with an OTLP endpoint in its
environment sends a trace per run item to the collector, each with its agent call inside."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from operator_support import Api, pool_spec
from run_support import finished_run, ready_pool, start_run

from agentpool import tracing
from cluster import wait_for


class Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver on loopback that keeps every span it is sent."""

    spans: list[tuple[dict[str, Any], Any]] = []
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        request = ExportTraceServiceRequest.FromString(body)
        with self.lock:
            for resource_spans in request.resource_spans:
                resource = _attributes(resource_spans.resource.attributes)
                for scope_spans in resource_spans.scope_spans:
                    self.spans.extend((resource, span) for span in scope_spans.spans)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return None


def _attributes(pairs: Any) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for pair in pairs:
        kind = pair.value.WhichOneof("value")
        values[pair.key] = getattr(pair.value, kind) if kind else None
    return values


@pytest.fixture
def collector() -> Iterator[str]:
    Collector.spans = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def test_an_operator_given_an_otlp_endpoint_exports_a_trace_per_item(
    api: Api,
    namespace: str,
    operator_cluster: Any,
    collector: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Restarted with OTEL_EXPORTER_OTLP_ENDPOINT set, the operator says so in its log and sends
    the collector one item span per item of a run, named for the run, its pool, namespace and
    agent, each with its agent call as a child span. It is restarted without it afterwards."""
    operator = operator_cluster.operator
    operator.stop()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector)
    # Spans are sent in batches every few seconds by default: sooner, for the test.
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    operator.start()
    monkeypatch.undo()
    try:
        api.create("agentpools", namespace, "p", pool_spec("echo", minSize=2))
        ready_pool(api, namespace, "p", 2)
        items = [{"id": f"item-{n}", "n": n} for n in range(6)]
        start_run(api, namespace, "traced", items, poolRef={"name": "p"}, itemId="id", cap=2)
        status = finished_run(api, namespace, "traced")
        assert (status["result"], status["succeeded"]) == ("Drained", 6)

        def item_spans() -> list[Any]:
            with Collector.lock:
                return [
                    span
                    for _, span in Collector.spans
                    if span.name == tracing.RUN_ITEM_SPAN
                    and _attributes(span.attributes).get(tracing.NAMESPACE) == namespace
                ]

        spans = wait_for(lambda: len(item_spans()) >= 6 and item_spans(), 60, message="6 items")
    finally:
        operator.stop()
        operator.start()
    assert "traces on: exported to OTLP over HTTP to " + collector in operator.log()
    with Collector.lock:
        everything = list(Collector.spans)
    assert {resource.get("service.name") for resource, _ in everything} == {
        tracing.DEFAULT_SERVICE_NAME
    }
    assert sorted(_attributes(span.attributes)[tracing.ITEM_ID] for span in spans) == [
        f"item-{n}" for n in range(6)
    ]
    calls = {
        bytes(span.parent_span_id): span
        for _, span in everything
        if span.name == tracing.AGENT_CALL_SPAN
    }
    for span in spans:
        attributes = _attributes(span.attributes)
        assert attributes[tracing.RUN] == "traced"
        assert attributes[tracing.POOL] == "p"
        assert attributes[tracing.OUTCOME] == tracing.SUCCEEDED
        assert attributes[tracing.AGENT].startswith("p-")
        call = calls[bytes(span.span_id)]
        assert call.trace_id == span.trace_id
        assert _attributes(call.attributes)[tracing.AGENT] == attributes[tracing.AGENT]
