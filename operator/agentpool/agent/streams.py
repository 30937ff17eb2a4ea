"""A streamed answer: a handler's parts, written to its caller as server-sent events as they come.

A handler that is an async generator function makes its output in parts (``yield`` each).
``agentpool.agent.server`` runs each item in a task of its own; for such a handler that task
reads the parts with :func:`read_parts`. Asked with ``Accept: text/event-stream``, it hands each
to a :class:`Stream`, which the request's own handler writes out (:meth:`Stream.write`) as the
protocol's events (``agentpool.wire.events``); otherwise it gathers them into the whole output,
the list of the parts, answered as JSON as any output is.

The two sides meet one event at a time, so a handler that makes parts faster than its caller
reads them waits at its ``yield`` instead of piling them up in the agent, and the item keeps its
slot until its last event is written. A caller that goes away is found by the write that fails
(a comment line goes out when no part has come for a while, so one is found even then): the
item's task is cancelled, which closes the generator, so its ``finally`` runs and the slot is
free again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from agentpool.wire import events, protocol


class Stream:
    """The events of one streamed answer on their way from the item's task to its caller."""

    def __init__(self) -> None:
        # (event, whether it is the last); one in hand at a time.
        self._events: asyncio.Queue[tuple[bytes, bool]] = asyncio.Queue(maxsize=1)

    async def send(self, event: bytes) -> None:
        """Hand on one event; waits while the one before is still unwritten."""
        await self._events.put((event, False))

    async def end(self, event: bytes) -> None:
        """Hand on the terminal event and wait until it is written: the stream has ended, and
        the item may give its slot back."""
        await self._events.put((event, True))
        await self._events.join()

    async def write(
        self, request: web.Request, item: asyncio.Task[Any], *, keep_alive: float
    ) -> web.StreamResponse:
        """Answer ``request`` with the events handed on, each written as it comes, until the
        terminal one; a comment line after ``keep_alive`` seconds without one. If the caller
        goes away (or this request is cancelled), ``item`` is cancelled and waited for."""
        response = web.StreamResponse(headers={"Cache-Control": "no-cache"})
        response.content_type = protocol.EVENT_STREAM
        try:
            await response.prepare(request)
            last = False
            while not last:
                try:
                    event, last = await asyncio.wait_for(self._events.get(), keep_alive)
                except TimeoutError:
                    if item.done():
                        # It ended without a terminal event, as it never should: the stream
                        # ends cut short, and the caller takes the agent as lost mid-answer.
                        break
                    await response.write(events.KEEP_ALIVE)
                    continue
                await response.write(event)
                if last:
                    await response.write_eof()
                self._events.task_done()
        except ConnectionError:
            # The caller went away: nobody will read another part, so the handler stops.
            item.cancel()
            await asyncio.wait({item})
        except BaseException:
            item.cancel()
            raise
        return response


async def read_parts(parts: AsyncIterator[Any], stream: Stream | None) -> list[Any]:
    """Read a handler's ``parts`` to their end: each handed to ``stream`` as an event as it
    comes, or, with no stream, gathered into the whole output, the list that is returned. A
    part that is not JSON fails the item there, as an output that is not JSON does. The
    generator is closed however its reading ends (a failure, or the item's task cancelled), so
    its ``finally`` runs."""
    gathered: list[Any] = []
    try:
        async for value in parts:
            # Encoded either way, so a part that is not JSON fails the item where it comes, with
            # the same message whether the answer is streamed or whole.
            try:
                event = events.part(value)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"a part of the handler's output is not JSON: {exc}") from exc
            if stream is None:
                gathered.append(value)
            else:
                await stream.send(event)
    finally:
        aclose = getattr(parts, "aclose", None)
        if aclose is not None:
            await aclose()
    return gathered
