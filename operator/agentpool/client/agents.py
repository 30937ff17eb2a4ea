"""The client's side of ``POST /invoke``: one item to a leased agent, its output or a CallFailed.

A leased agent is called directly, not through the operator, on the same lean HTTP/1.1 client the
operator uses (:mod:`agentpool.wire.connections`): connections are kept alive per agent, so the
calls of one lease after the first cost no connection set-up. The envelope is the protocol's
(:func:`agentpool.wire.envelopes.envelope_body`). The token goes into the ``Authorization``
header only, never into an error's message.
"""

from __future__ import annotations

import asyncio
import functools
import json
from typing import Any
from urllib.parse import urlsplit

from agentpool.client.errors import CallFailed
from agentpool.wire import protocol
from agentpool.wire.connections import WireError, WirePool
from agentpool.wire.envelopes import EnvelopeBody

_COMPACT = json.JSONEncoder(separators=(",", ":"))
_MESSAGE_BODY_CHARS = 200


@functools.lru_cache(maxsize=256)
def _target(endpoint: str) -> tuple[str, int, str]:
    """(host, port, Host header) of a plain ``http://`` endpoint."""
    parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    if parts.scheme != "http" or not parts.hostname:
        raise CallFailed(
            protocol.BAD_REQUEST, f"the agent's endpoint {endpoint!r} is not an http:// URL"
        )
    return parts.hostname, parts.port or 80, parts.netloc


def _head(authority: str, token: str) -> bytes:
    lines = [
        f"POST {protocol.INVOKE_PATH} HTTP/1.1",
        f"Host: {authority}",
        f"Authorization: Bearer {token}",
        "Content-Type: application/json",
    ]
    return ("\r\n".join(lines) + "\r\n").encode("latin-1")


class AgentCaller:
    """Calls agents by endpoint and token; one per client, its connections kept between calls."""

    def __init__(self) -> None:
        self._wire = WirePool()

    def close(self) -> None:
        self._wire.close()

    async def invoke(
        self, endpoint: str, token: str, envelope: EnvelopeBody, *, timeout: float
    ) -> Any:
        """The agent's output for ``envelope``; raises :class:`CallFailed` with the agent's
        reason, or CallTimeout / AgentLost when no answer came."""
        host, port, authority = _target(endpoint)
        try:
            body = _COMPACT.encode(envelope).encode()
        except (TypeError, ValueError) as error:
            raise CallFailed(protocol.BAD_REQUEST, f"the item is not JSON: {error}") from None
        try:
            async with asyncio.timeout(timeout):
                answer = await self._wire.request(host, port, _head(authority, token), body)
        except TimeoutError:
            raise CallFailed(
                protocol.CALL_TIMEOUT, f"the agent at {endpoint} gave no answer within {timeout:g}s"
            ) from None
        except (OSError, asyncio.IncompleteReadError, WireError, ValueError) as error:
            cause = str(error) or type(error).__name__
            raise CallFailed(
                protocol.AGENT_LOST, f"lost the agent at {endpoint}: {cause}"
            ) from None
        return output_of(endpoint, answer.status, answer.body)


def output_of(endpoint: str, status: int, raw: bytes) -> Any:
    """The output in an answer to ``POST /invoke``, or the :class:`CallFailed` it means."""
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if status == 200 and isinstance(data, dict) and "output" in data:
        return data["output"]
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and isinstance(error.get("reason"), str):
        raise CallFailed(error["reason"], str(error.get("message", "")))
    text = raw[:_MESSAGE_BODY_CHARS].decode("utf-8", "replace")
    raise CallFailed(
        protocol.BAD_RESPONSE,
        protocol.outside_protocol(endpoint, f"POST {protocol.INVOKE_PATH}", status, text),
    )
