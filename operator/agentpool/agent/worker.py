"""The threads that run an agent's synchronous functions, off the event loop.

``agentpool.agent.server`` hands them the start-up, each synchronous handler call, the reset and
the lease hooks, so the server keeps answering ``/healthz`` and ``/status`` while they run. One
thread per slot: an agent of several slots runs that many sync handler calls at once. They are
daemon threads, unlike an executor's, so an agent whose handler hangs past the drain period can
still exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import queue
import threading
from collections.abc import Callable
from typing import Any

_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]


class Worker:
    """``threads`` daemon threads running submitted calls in the order submitted (one at a time
    with one thread), resolving one asyncio future each."""

    def __init__(self, name: str, *, threads: int = 1) -> None:
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}-{n}", daemon=True)
            for n in range(1, threads + 1)
        ]
        for thread in self._threads:
            thread.start()

    def call(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """Run ``fn(*args)`` in the worker thread, in a copy of the caller's context (so the
        item's trace span is current there as it is for an async handler); await the returned
        future for its result."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._jobs.put((loop, future, contextvars.copy_context().run, (fn, *args)))
        return future

    def _serve(self) -> None:
        while True:
            loop, future, fn, args = self._jobs.get()
            try:
                result = fn(*args)
            except BaseException as exc:  # handed on to the coroutine awaiting the call
                _settle(loop, future, None, exc)
            else:
                _settle(loop, future, result, None)


def is_async(fn: Callable[..., Any]) -> bool:
    """Whether calling ``fn`` gives a coroutine to await rather than a result to use."""
    if inspect.iscoroutinefunction(fn):
        return True
    # A callable object whose ``__call__`` is ``async def`` is awaited too.
    return inspect.iscoroutinefunction(type(fn).__call__)


def is_async_generator(fn: Callable[..., Any]) -> bool:
    """Whether calling ``fn`` gives an async generator, whose parts the agent reads one by one
    (a streaming handler) rather than a result."""
    if inspect.isasyncgenfunction(fn):
        return True
    return inspect.isasyncgenfunction(type(fn).__call__)


def _settle(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    result: Any,
    error: BaseException | None,
) -> None:
    # A closed loop means the agent is exiting and nobody awaits this call any more.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(_resolve, future, result, error)


def _resolve(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
