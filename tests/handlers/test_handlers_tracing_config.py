"""Which traces the standard ``OTEL_*`` variables ask of the operator: none unless they ask, the
SDK's own meaning of each variable, and a clear refusal of what the operator does not ship."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.util._once import Once

from agentpool import tracing
from agentpool.tracing import Choice, TracingConfigError, choose

VARIABLES = (
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        ({"OTEL_SERVICE_NAME": "ops"}, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, Choice(("otlp",))),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, Choice(("otlp",))),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, Choice(("otlp",))),
        ({"OTEL_TRACES_EXPORTER": "console"}, Choice(("console",))),
        ({"OTEL_TRACES_EXPORTER": "OTLP, console,otlp"}, Choice(("otlp", "console"))),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, None),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, None),
        ({"OTEL_SDK_DISABLED": "TRUE", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, None),
        ({"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "otlp"}, Choice(("otlp",))),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            },
            Choice(("otlp",)),
        ),
        # The traces' own protocol wins over the general one, as in the SDK.
        (
            {
                "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            },
            Choice(("otlp",)),
        ),
        # A console exporter has no protocol to check.
        (
            {"OTEL_TRACES_EXPORTER": "console", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            Choice(("console",)),
        ),
    ],
)
def test_the_variables_choose_the_traces(environ: dict[str, str], expected: Choice | None) -> None:
    """Traces are on only when a variable asks for them, and off when one turns them off."""
    assert choose(environ) == expected


@pytest.mark.parametrize(
    ("environ", "words"),
    [
        (
            {"OTEL_TRACES_EXPORTER": "jaeger"},
            ["OTEL_TRACES_EXPORTER", "'jaeger'", "'otlp'", "none"],
        ),
        ({"OTEL_TRACES_EXPORTER": "otlp,zipkin"}, ["'zipkin'", "does not ship"]),
        ({"OTEL_TRACES_EXPORTER": "none,otlp"}, ['"none" alone']),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            ["OTEL_EXPORTER_OTLP_PROTOCOL", '"grpc"', "http/protobuf", "4318"],
        ),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"},
            ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", '"http/json"'],
        ),
    ],
)
def test_what_the_operator_does_not_ship_is_refused_saying_what_to_set(
    environ: dict[str, str], words: list[str]
) -> None:
    """An exporter or protocol the image lacks stops start-up with a message naming the
    variable, what it said, and what it may say instead."""
    with pytest.raises(TracingConfigError) as raised:
        choose(environ)
    for word in words:
        assert word in str(raised.value)


@given(
    st.dictionaries(
        st.sampled_from(VARIABLES),
        st.one_of(
            st.sampled_from(["", "none", "otlp", "console", "true", "grpc", "http/protobuf"]),
            st.text(max_size=20),
        ),
    )
)
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_variables_give_a_choice_or_a_clear_refusal(environ: dict[str, str]) -> None:
    """Whatever the variables say, the answer is off, a choice of shipped exporters, or a
    refusal that names an ``OTEL_`` variable; never another error."""
    refusal = ""
    try:
        choice = choose(environ)
    except TracingConfigError as error:
        choice, refusal = None, str(error)
    if refusal:
        assert "OTEL_" in refusal
    elif choice is not None:
        assert choice.exporters
        assert set(choice.exporters) <= set(tracing.EXPORTERS)
        assert environ.get("OTEL_SDK_DISABLED", "").strip().lower() != "true"


@pytest.mark.parametrize(
    ("environ", "said"),
    [
        ({}, "off"),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"},
            "exported to OTLP over HTTP to http://collector:4318, sampler parentbased_always_on",
        ),
        (
            {"OTEL_TRACES_EXPORTER": "otlp,console", "OTEL_TRACES_SAMPLER": "traceidratio"},
            "exported to OTLP over HTTP to http://localhost:4318 and the console, "
            "sampler traceidratio",
        ),
    ],
)
def test_the_log_says_where_traces_go(environ: dict[str, str], said: str) -> None:
    """The operator's start-up line names the exporter, its endpoint and the sampler."""
    assert tracing.describe(environ) == said


def test_a_refused_configuration_stops_the_operator_before_it_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``agentpool run`` with an exporter it does not ship exits 2 at once with the reason."""
    from agentpool import cli

    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "jaeger")
    assert cli.main(["run", "--standalone"]) == 2
    assert "OTEL_TRACES_EXPORTER" in capsys.readouterr().err


class Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver that keeps what it is sent."""

    received: list[tuple[str, str, bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.received.append((self.path, self.headers.get("Content-Type", ""), body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return None


@pytest.fixture
def collector() -> Iterator[str]:
    Collector.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def _reset_provider() -> None:
    # A process sets its provider once; the test starts and ends with none, as a fresh one.
    trace._TRACER_PROVIDER_SET_ONCE = Once()  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]
    tracing.TRACER._real_tracer = None  # type: ignore[attr-defined]


def test_an_otlp_endpoint_alone_sends_the_spans_there(
    collector: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OTEL_EXPORTER_OTLP_ENDPOINT alone installs a provider that sends the operator's spans to
    the collector's /v1/traces as OTLP protobuf, named for the operator unless told otherwise;
    shutting it down flushes what is queued."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector)
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    _reset_provider()
    try:
        provider = tracing.install()
        assert provider is not None
        assert trace.get_tracer_provider() is provider
        with tracing.span(tracing.RUN_ITEM_SPAN, attributes={tracing.RUN: "nightly"}):
            pass
        tracing.shutdown(provider)
    finally:
        _reset_provider()
    ((path, content_type, body),) = Collector.received
    assert (path, content_type) == ("/v1/traces", "application/x-protobuf")
    assert tracing.RUN_ITEM_SPAN.encode() in body
    assert b"nightly" in body
    assert tracing.DEFAULT_SERVICE_NAME.encode() in body
