"""How a run's item becomes a request to an HTTP pool's agent, and its answer the item's output.

A pool of ``spec.protocol: HTTP`` runs any HTTP/1.1 server as it is, so a run on it says in
``spec.request`` how each item is sent: the item is the JSON body, to ``request.path`` with
``request.method`` and ``request.headers``. :func:`build_request` makes that request and
:func:`read_answer` decides what the answer came to: a 2xx answer's body is the output (parsed
JSON when the answer says its body is JSON, else its text), any other status fails the item with
reason ``HTTPStatus``. Which way a run speaks to a pool is fixed by the run (``spec.request`` set
or not), and :func:`mismatch` says, in the user's words, when the pool serves the other one.
The dispatcher (:mod:`agentpool.handlers.dispatch`) sends the request through
:mod:`agentpool.io.agents` and calls these; the engine makes the attempt
(:mod:`agentpool.runs.calls`). Pure: no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentpool.api import PoolRunSpec, RunRequest
from agentpool.api.reasons import Reason
from agentpool.runs.contracts import ItemRequest
from agentpool.runs.results import CHUNK_BYTES, encode

#: The protocol of a pool whose agents take requests as they are (``AgentPool.spec.protocol``).
HTTP = "HTTP"
#: The protocol of a pool whose agents take items in the agent protocol's envelope.
AGENTPOOL = "Agentpool"
JSON_TYPE = "application/json"
ANSWER_MAX = 2 * CHUNK_BYTES
"""The most of an answer's body that is read, in bytes: an output must fit one result ConfigMap
as compact JSON, and no more than twice that is read to find out whether it does."""
MESSAGE_BODY_CHARS = 200
"""How much of a failed answer's body its failure message quotes, as a BadResponse's does."""


@dataclass(frozen=True, slots=True)
class AnswerResult:
    """What an agent's answer to an item's request came to, as the engine judges any attempt's
    result (:class:`~agentpool.runs.contracts.AttemptResult`)."""

    ok: bool
    output: Any = None
    reason: str = ""
    message: str = ""
    lost: bool = False
    agent_failed: bool = False
    """The failure is the agent's (a 5xx): the agent goes back counted as failed. A 4xx or 3xx
    is the item's, and the agent goes back as sound."""


def speaks(spec: PoolRunSpec) -> str:
    """The protocol a run speaks to its pools: HTTP when it says how an item becomes a request,
    else the agent protocol's."""
    return HTTP if spec.request is not None else AGENTPOOL


def mismatch(pool: str, served: str, *, speaks: str) -> str | None:
    """Why a run that ``speaks`` one protocol cannot use ``pool``, which serves ``served``; None
    when they agree. It names the fields to change, on either side."""
    if served == speaks:
        return None
    if served == HTTP:
        return (
            f'AgentPool "{pool}" serves plain HTTP (spec.protocol: HTTP), whose agents take '
            "requests rather than the agent protocol's items, and the run has no spec.request: "
            "set spec.request (its path at least, with mode Call) to say how each item becomes a "
            "request, or name a pool of spec.protocol Agentpool"
        )
    return (
        f'AgentPool "{pool}" serves the agent protocol (spec.protocol: {served}), whose agents '
        "take items in its envelope, and the run sets spec.request, which is for pools of "
        "spec.protocol HTTP: remove spec.request, or name an HTTP pool"
    )


def build_request(request: RunRequest, item: Any) -> ItemRequest:
    """The request that carries ``item``: its JSON as the body, Content-Type application/json
    unless the run's headers name another."""
    headers = dict(request.headers or {})
    if not any(name.lower() == "content-type" for name in headers):
        headers = {"Content-Type": JSON_TYPE, **headers}
    return ItemRequest(
        method=request.method,
        path=request.path,
        headers=tuple(headers.items()),
        body=encode(item).encode(),
    )


def is_json(content_type: str) -> bool:
    """Whether a Content-Type says the body is JSON: application/json or any type ending in
    +json (application/problem+json), parameters and case aside."""
    media = content_type.split(";", 1)[0].strip().lower()
    kind, _, subtype = media.partition("/")
    return bool(kind) and (subtype == "json" or subtype.endswith("+json"))


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_body(content_type: str, body: bytes) -> Any:
    """The output an answer's body stands for: its JSON when it says it is JSON and parses,
    else its text (UTF-8, anything else replaced). An empty body is the empty text."""
    if body and is_json(content_type):
        try:
            return json.loads(body, parse_constant=_refuse_constant)
        except (ValueError, RecursionError):
            pass  # a body that is not the JSON it claims is kept as it came, as text
    return body.decode("utf-8", "replace")


def read_answer(
    request: ItemRequest, status: int, content_type: str, body: bytes, *, whole: bool = True
) -> AnswerResult:
    """What an agent's answer of ``status`` to ``request`` came to. ``whole`` is False when the
    body ran past :data:`ANSWER_MAX` and was cut there."""
    if not 200 <= status < 300:
        start = body[:MESSAGE_BODY_CHARS].decode("utf-8", "replace")
        return AnswerResult(
            ok=False,
            reason=Reason.HTTP_STATUS,
            message=f"{request.method} {request.path} answered HTTP {status}: {start!r}",
            agent_failed=status >= 500,
        )
    if not whole:
        return AnswerResult(
            ok=False,
            reason=Reason.OUTPUT_TOO_LARGE,
            message=f"the answer's body is over {ANSWER_MAX} bytes",
        )
    return AnswerResult(ok=True, output=parse_body(content_type, body))
