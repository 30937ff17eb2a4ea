"""How an agent answers: compact JSON bodies, and ``{"error": {"reason", "message"}}`` refusals.

``agentpool.agent.server`` builds every response with these, so each path answers in the one shape
the operator's agent client (``agentpool.io.agents``) reads, and an exception is told as Python's
last traceback line names it.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Mapping
from typing import Any

from aiohttp import web

#: Error messages are cut to this length: they travel into run status and must stay small.
MAX_MESSAGE_CHARS = 2000
JSON_TYPE = "application/json"


def dumps(value: Any) -> bytes:
    """``value`` as compact JSON; NaN and infinities are refused, since they are not JSON."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


def answer(value: Any, *, status: int = 200) -> web.Response:
    """A JSON answer."""
    return web.Response(status=status, body=dumps(value), content_type=JSON_TYPE)


def describe(exc: BaseException | None) -> str:
    """The exception as Python's last traceback line names it: ``KeyError: 'n'``, not ``'n'``."""
    if exc is None:
        return "unknown error"
    text = "".join(traceback.format_exception_only(exc)).strip()
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 1] + "…"
    return text


def error(
    status: int, reason: str, message: str, *, headers: Mapping[str, str] | None = None
) -> web.Response:
    """A refusal or failure: ``{"error": {"reason", "message"}}`` with ``status``."""
    body = dumps({"error": {"reason": reason, "message": message}})
    return web.Response(status=status, body=body, content_type=JSON_TYPE, headers=headers)
