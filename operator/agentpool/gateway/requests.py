"""A call's body, read once at the edge: JSON into a :class:`GatewayRequest`, then the envelope.

:func:`parse_request` turns the bytes a caller sent into the validated model, or a 400 that
names what is wrong in the wire's own words (``checkoutTimeoutSeconds: must be greater than
0``); :func:`envelope` encodes the agent protocol's envelope for it once, so the item is checked
for JSON the agent can read before any agent is taken. Pure: the server calls both.
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass

from pydantic import ValidationError

from agentpool.api.gateway import GatewayRequest
from agentpool.gateway.errors import invalid
from agentpool.wire.envelopes import envelope_body

#: The fields a body may have, for the message that refuses an unknown one.
FIELDS = ", ".join(field.alias or name for name, field in GatewayRequest.model_fields.items())
# One encoder for every envelope; a number JSON cannot carry (1e400 read as infinity) is refused.
_STRICT = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
# Ids the gateway names: unique in this process, and apart from another operator's.
_PREFIX = f"gw-{os.urandom(4).hex()}-"
_numbers = itertools.count(1)


def _constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def parse_request(raw: bytes) -> GatewayRequest:
    """The request in ``raw``; raises a 400 :class:`GatewayError` saying what is wrong."""
    try:
        data = json.loads(raw, parse_constant=_constant)
    except (ValueError, RecursionError) as error:  # RecursionError: nested past the stack
        raise invalid(f"the body is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise invalid('the body must be a JSON object with an "item", as {"item": ...}')
    try:
        return GatewayRequest.model_validate(data)
    except ValidationError as error:
        raise invalid("; ".join(_describe(error))) from None


def _describe(error: ValidationError) -> list[str]:
    """Each problem as ``field: what is wrong``, in the body's own names."""
    problems = []
    for problem in error.errors(include_url=False, include_input=False):
        where = ".".join(str(part) for part in problem["loc"]) or "body"
        if problem["type"] == "extra_forbidden":
            problems.append(f"{where}: unknown field (a call takes {FIELDS})")
        elif problem["type"] == "missing":
            problems.append(f"{where}: required")
        else:
            problems.append(f"{where}: {problem['msg'][0].lower()}{problem['msg'][1:]}")
    return problems


@dataclass(frozen=True, slots=True)
class EncodedItem:
    """The item as the agent will get it: its id and the encoded envelope."""

    id: str
    body: bytes


def envelope(request: GatewayRequest) -> EncodedItem:
    """The agent protocol's envelope for ``request``, encoded; a 400 when the item or input
    holds what JSON cannot carry."""
    item_id = request.id if request.id is not None else f"{_PREFIX}{next(_numbers)}"
    fields = envelope_body(id=item_id, item=request.item, input=request.input, attempt=1, run=None)
    try:
        body = _STRICT.encode(fields).encode()
    except (ValueError, RecursionError) as error:
        raise invalid(f"the item or input cannot be sent as JSON: {error}") from None
    return EncodedItem(item_id, body)
