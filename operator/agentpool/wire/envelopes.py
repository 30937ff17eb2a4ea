"""The envelope an agent is handed with each item, and its validation.

Both ends of ``POST /invoke`` meet here. The senders build its body with :func:`envelope_body`:
the run engine (``agentpool.runs.calls``), the gateway (``agentpool.gateway.requests``) and the
Python client's leases send ``{"id", "item", "input", "attempt", "run"}`` (the agent protocol,
v1). The agents read it with :func:`parse_envelope`: the SDK's server (``agentpool.agent.server``)
and the local kubelet's simulated agent; a body that is not such an object is answered 400 with
the sentence this module returns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TypedDict

from agentpool.wire import protocol


class EnvelopeBody(TypedDict):
    """The ``POST /invoke`` body as the operator sends it: every key, ``run`` null for a call
    that belongs to no run."""

    id: Any
    item: Any
    input: Any
    attempt: int
    run: str | None


@dataclass(frozen=True, slots=True)
class Envelope:
    """One item as delivered: what to work on and which attempt this is."""

    id: Any
    item: Any
    input: Any
    attempt: int
    run: str | None
    cast: bool

    def body(self) -> EnvelopeBody:
        """The JSON object the operator sends, which :func:`parse_envelope` reads back as this
        envelope (a cast is asked for in the ``Prefer`` header, not in the body)."""
        return envelope_body(
            id=self.id, item=self.item, input=self.input, attempt=self.attempt, run=self.run
        )


def envelope_body(*, id: Any, item: Any, input: Any, attempt: int, run: str | None) -> EnvelopeBody:
    """The body of :class:`Envelope`, built without one: the operator sends one per attempt."""
    return {"id": id, "item": item, "input": input, "attempt": attempt, "run": run}


def parse_envelope(raw: bytes, *, prefer: str = "") -> Envelope | str:
    """The envelope in ``raw``, or a sentence saying why it is not one.

    A cast is asked for by the ``Prefer: respond-async`` header (RFC 7240) or by ``"mode": "Cast"``
    in the body.
    """
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested past the stack
        return f"the body is not JSON: {exc}"
    if not isinstance(body, dict):
        return "the body must be a JSON object with 'id' and 'item'"
    if "id" not in body:
        return "the body has no 'id'"
    item_id = body["id"]
    if isinstance(item_id, bool) or not isinstance(item_id, str | int):
        return "'id' must be a string or an integer"
    if "item" not in body:
        return "the body has no 'item'"
    attempt = body.get("attempt", 1)
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        return "'attempt' must be an integer of at least 1"
    run = body.get("run")
    if run is not None and not isinstance(run, str):
        return "'run' must be a string"
    mode = body.get("mode", "Call")
    if mode not in ("Call", "Cast"):
        return "'mode' must be 'Call' or 'Cast'"
    cast = mode == "Cast" or protocol.RESPOND_ASYNC in prefer.lower()
    return Envelope(
        id=item_id, item=body["item"], input=body.get("input"), attempt=attempt, run=run, cast=cast
    )
