"""The agent's side of a trace: the author's handler runs in a span that continues the caller's.

The operator sends each ``POST /invoke`` with the W3C ``traceparent`` header of its own span (a
run's item, or a gateway call); :mod:`agentpool.agent.server` runs the item inside
:func:`item_span`, so the spans an author opens in the handler join the same trace. Tracing is
optional for agents: without the ``opentelemetry-api`` package every function here does nothing,
and with it but no tracer provider set up by the author, the API's no-op is all it costs. The
author sets up the provider and exporter as for any OpenTelemetry program (the SDK, or
``opentelemetry-instrument``).
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator, Mapping
from typing import Any

ITEM_SPAN = "agentpool.agent.item"
"""The span of one item in the agent: the author's handler runs inside it."""
TRACE_HEADERS = ("traceparent", "tracestate")
"""The W3C trace context headers the agent takes from the caller."""


def _installed() -> bool:
    try:
        return importlib.util.find_spec("opentelemetry.trace") is not None
    except ImportError:  # not even the namespace package
        return False


ENABLED = _installed()
"""Whether the OpenTelemetry API is installed beside the agent."""


def trace_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The W3C trace context headers among ``headers`` (which may be case-insensitive)."""
    if not ENABLED:
        return {}
    return {name: value for name in TRACE_HEADERS if (value := headers.get(name)) is not None}


@contextlib.contextmanager
def item_span(
    carrier: Mapping[str, str], *, agent: str, item: Any, attempt: int, run: str | None
) -> Iterator[Any]:
    """Run the body in the item's span, a child of the trace context in ``carrier``; yields the
    span (None without the OpenTelemetry API)."""
    if not ENABLED:
        yield None
        return
    from opentelemetry import propagate, trace

    attributes: dict[str, str | int] = {
        "agentpool.agent.name": agent,
        "agentpool.item.id": str(item),
        "agentpool.item.attempt": attempt,
    }
    if run:
        attributes["agentpool.run"] = run
    tracer = trace.get_tracer("agentpool.agent")
    with tracer.start_as_current_span(
        ITEM_SPAN,
        context=propagate.extract(carrier),
        kind=trace.SpanKind.SERVER,
        attributes=attributes,
        # The handler's failure is reported by the agent as an item failure: noted below.
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield span


def note_failure(span: Any, error: BaseException, message: str) -> None:
    """Mark the item's span failed by the author's ``error``."""
    if span is None:
        return
    from opentelemetry import trace

    span.record_exception(error)
    span.set_status(trace.StatusCode.ERROR, message)
