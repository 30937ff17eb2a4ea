"""The operator's OpenTelemetry traces: off unless the standard ``OTEL_*`` variables ask for them.

``agentpool run`` calls :func:`install` once at start-up and :func:`shutdown` on exit. What to do
is decided by :func:`choose` from the variables alone (pure), following the SDK's own meaning of
them: ``OTEL_SDK_DISABLED=true`` turns everything off, ``OTEL_TRACES_EXPORTER`` names the
exporters (``otlp``, ``console``, or ``none``), and an ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or its
``_TRACES_`` form) alone means ``otlp``. With none of them set no tracer provider is installed,
and every span below costs only the API's no-op. The SDK reads the rest itself: the endpoint,
headers and timeout of the exporter, ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``,
the sampler (``OTEL_TRACES_SAMPLER``) and the batch processor's limits. The operator ships the
OTLP exporter over HTTP (protobuf) only, which keeps the image small; a gRPC protocol is refused
with a message that says so.

The run engine (:mod:`agentpool.runs.calls`) opens a span per item attempt, the gateway's
handlers (:mod:`agentpool.handlers.gateway`) one per call; the handlers mark the checkout on it
as an event, and open a child span for the agent call, whose context :mod:`agentpool.io.agents`
hands the agent in the W3C ``traceparent`` header, where the agent SDK takes it up. Span names
and attribute keys are defined here, once.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from opentelemetry import context, propagate, trace
from opentelemetry.util import types

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

TRACER = trace.get_tracer("agentpool")
"""The operator's tracer: a no-op until :func:`install` sets a provider."""

RUN_ITEM_SPAN = "agentpool.run.item"
"""One attempt at one item of a PoolRun: the checkout and the agent call."""
GATEWAY_CALL_SPAN = "agentpool.gateway.call"
"""One call or cast through the gateway: the checkout and the agent call."""
CHECKOUT_EVENT = "agentpool.checkout"
"""The wait for an agent of the pool, over, as an event on the item's or call's span (an event
costs a fraction of a span, and an item of a run pays for every one)."""
AGENT_CALL_SPAN = "agentpool.agent.invoke"
"""The agent's ``POST /invoke``: its client span, whose context the agent receives."""

NAMESPACE = "agentpool.namespace"
POOL = "agentpool.pool"
RUN = "agentpool.run"
ITEM_ID = "agentpool.item.id"
ITEM_INDEX = "agentpool.item.index"
ATTEMPT = "agentpool.item.attempt"
VERB = "agentpool.gateway.verb"
AGENT = "agentpool.agent"
"""The agent's pod."""
OUTCOME = "agentpool.outcome"
"""``Succeeded``, or the reason of the failure (``HandlerError``, ``CallTimeout``, ...)."""
WAIT_SECONDS = "agentpool.checkout.wait_seconds"
CHECKOUT_KIND = "agentpool.checkout.kind"
"""``warm`` when an agent was free at once, ``scaleup`` when the checkout waited for one."""

SUCCEEDED = "Succeeded"

DEFAULT_SERVICE_NAME = "agentpool-operator"
EXPORTERS = ("otlp", "console")
"""The exporters the operator ships; ``none`` turns traces off."""
OTLP_PROTOCOL = "http/protobuf"


class TracingConfigError(ValueError):
    """The ``OTEL_*`` variables ask for what the operator cannot do."""


@dataclass(frozen=True, slots=True)
class Choice:
    """What the ``OTEL_*`` variables ask for, when they turn traces on."""

    exporters: tuple[str, ...]


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


def choose(environ: Mapping[str, str]) -> Choice | None:
    """The traces ``environ`` asks for; None when it asks for none (the default).

    Raises :class:`TracingConfigError` for an exporter or OTLP protocol the operator does not
    ship, naming the variable, what it said and what it may say.
    """
    if _true(environ.get("OTEL_SDK_DISABLED")):
        return None
    named = environ.get("OTEL_TRACES_EXPORTER", "").strip()
    if named:
        exporters = tuple(dict.fromkeys(e.strip().lower() for e in named.split(",") if e.strip()))
        if "none" in exporters:
            if len(exporters) > 1:
                raise TracingConfigError(
                    f'OTEL_TRACES_EXPORTER="{named}" names "none" beside other exporters: '
                    'set "none" alone to turn traces off, or leave it out'
                )
            return None
        unknown = [e for e in exporters if e not in EXPORTERS]
        if unknown:
            raise TracingConfigError(
                f'OTEL_TRACES_EXPORTER="{named}" names {", ".join(map(repr, unknown))}, which the '
                f'operator does not ship: use {", ".join(map(repr, EXPORTERS))} or "none"'
            )
    elif environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    ):
        exporters = ("otlp",)
    else:
        return None
    if "otlp" in exporters:
        for variable in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
            protocol = environ.get(variable, "").strip()
            if protocol:
                if protocol != OTLP_PROTOCOL:
                    raise TracingConfigError(
                        f'{variable}="{protocol}": the operator ships the OTLP exporter over '
                        f'"{OTLP_PROTOCOL}" only; set it so, or unset it, and point the '
                        "endpoint at the collector's HTTP port (4318 by default)"
                    )
                break
    return Choice(exporters=exporters)


def describe(environ: Mapping[str, str]) -> str:
    """Where the traces ``environ`` asks for go, in words for the operator's log."""
    choice = choose(environ)
    if choice is None:
        return "off"
    places = []
    for name in choice.exporters:
        if name == "otlp":
            endpoint = (
                environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                or "http://localhost:4318"
            )
            places.append(f"OTLP over HTTP to {endpoint}")
        else:
            places.append("the console")
    sampler = environ.get("OTEL_TRACES_SAMPLER", "parentbased_always_on")
    return f"exported to {' and '.join(places)}, sampler {sampler}"


def install(environ: Mapping[str, str] | None = None) -> TracerProvider | None:
    """Set the process's tracer provider as ``environ`` (the process's own by default) asks, and
    return it; None, with nothing installed, when it asks for no traces."""
    choice = choose(os.environ if environ is None else environ)
    if choice is None:
        return None
    # The SDK is imported only when traces are on: off, the operator loads the API alone.
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    provider = TracerProvider(resource=resource)
    for name in choice.exporters:
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        else:
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    trace.set_tracer_provider(provider)
    return provider


def shutdown(provider: TracerProvider | None) -> None:
    """Send the spans still queued and stop the exporters (nothing when traces are off)."""
    if provider is not None:
        provider.shutdown()


_NO_SPAN = contextlib.nullcontext(trace.INVALID_SPAN)


def span(
    name: str,
    *,
    kind: trace.SpanKind = trace.SpanKind.INTERNAL,
    attributes: types.Attributes = None,
) -> AbstractContextManager[trace.Span]:
    """A span of the operator's, current while the block runs, a child of the current one.

    With no tracer provider in the process (traces off) it is a shared do-nothing context that
    yields the invalid span, and the block runs as it would without tracing: the API's own no-op
    costs several microseconds per span, which an item of the run engine pays three times.
    """
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return _NO_SPAN
    return TRACER.start_as_current_span(name, kind=kind, attributes=attributes)


def note_checkout(waited: float, *, kind: str = "", agent: str = "", failed: str = "") -> None:
    """Mark the current span (the item's, or the call's) with its checkout: the wait in seconds,
    and the kind of checkout and the agent it got, or the reason it got none."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    attributes: dict[str, str | float] = {WAIT_SECONDS: waited}
    if failed:
        attributes[OUTCOME] = failed
    else:
        attributes.update({CHECKOUT_KIND: kind, AGENT: agent})
    span.add_event(CHECKOUT_EVENT, attributes)


@contextlib.contextmanager
def continued(carrier: Mapping[str, str]) -> Iterator[None]:
    """Make the trace context in ``carrier`` (a caller's ``traceparent``, ``tracestate``) current
    while the block runs, so that the spans opened in it continue the caller's trace; nothing
    when it holds none or traces are off."""
    if not carrier or isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        yield
        return
    token = context.attach(propagate.extract(carrier))
    try:
        yield
    finally:
        context.detach(token)


def inject(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` with the current span's context added (``traceparent``, and ``tracestate``
    when there is one), through the configured propagator; unchanged when no span records."""
    if trace.get_current_span().get_span_context().is_valid:
        propagate.inject(headers)
    return headers
