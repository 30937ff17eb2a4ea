"""The client without ``await``: the same calls for scripts, notebooks and threads.

::

    from agentpool.client.sync import Client

    with Client.from_kubeconfig() as client:
        with client.lease("echo", ttl=60) as agent:
            agent.invoke({"text": "hello"})
        client.call("echo", {"text": "one item"})
        run = client.submit("echo", [{"n": n} for n in range(100)], cap=4)
        for result in run.results():
            ...

Each client runs the asynchronous :class:`agentpool.client.Client` on an event loop in a thread
of its own, for as long as it is open, so a held lease goes on being renewed while the calling
thread does other work, and a notebook's running loop is no obstacle. Interrupting a call
(Ctrl-C) cancels it on that loop; leaving a ``with client.lease(...)`` block, however it is left,
gives the agent back.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Generic, ParamSpec, TypeVar

from agentpool.api import AgentPoolStatus, FailurePolicy, PoolRunStatus, RunMode, Source
from agentpool.client import client as async_client
from agentpool.client import leases, runs
from agentpool.client.records import Result
from agentpool.client.settings import ClientSettings

T = TypeVar("T")
P = ParamSpec("P")
Inner = TypeVar("Inner")


class _Loop:
    """An event loop running in a daemon thread until :meth:`close`."""

    def __init__(self, *, cancel_wait: float) -> None:
        self.loop = asyncio.new_event_loop()
        self._cancel_wait = cancel_wait
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="agentpool-client", daemon=True
        )
        self._thread.start()

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        """What ``work`` returns, run on the loop. An interrupt of the waiting thread cancels
        it and waits (a while) for it to end, so its clean-up (a lease's release) is done."""
        ended = threading.Event()

        async def tracked() -> T:
            try:
                return await work
            finally:
                ended.set()

        future: Future[T] = asyncio.run_coroutine_threadsafe(tracked(), self.loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            ended.wait(self._cancel_wait)
            raise

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class _OnLoop(Generic[Inner]):
    """An object of the asynchronous client, its calls run on the client's loop."""

    def __init__(self, inner: Inner, loop: _Loop) -> None:
        self._inner = inner
        self._loop = loop


class LeasedAgent(_OnLoop[leases.LeasedAgent]):
    """:class:`agentpool.client.LeasedAgent`, called without ``await``."""

    def __init__(self, agent: leases.LeasedAgent, loop: _Loop) -> None:
        super().__init__(agent, loop)
        self.lease = agent.lease
        self.name = agent.name
        self.endpoint = agent.endpoint
        self.token_secret_ref = agent.token_secret_ref

    @property
    def ended(self) -> Exception | None:
        return self._inner.ended

    def invoke(self, item: Any, input: Any = None, *, timeout: float | None = None) -> Any:
        return self._loop.run(self._inner.invoke(item, input, timeout=timeout))


class Run(_OnLoop[runs.Run]):
    """:class:`agentpool.client.Run`, followed without ``await``."""

    def __init__(self, run: runs.Run, loop: _Loop) -> None:
        super().__init__(run, loop)
        self.name = run.name
        self.namespace = run.namespace

    @property
    def status(self) -> PoolRunStatus:
        return self._inner.status

    def refresh(self) -> PoolRunStatus:
        return self._loop.run(self._inner.refresh())

    def results(self) -> Iterator[Result]:
        stream = self._inner.results()
        try:
            while True:
                try:
                    yield self._loop.run(_next(stream))
                except StopAsyncIteration:
                    return
        finally:
            self._loop.run(stream.aclose())

    def wait(self, timeout: float | None = None) -> PoolRunStatus:
        return self._loop.run(self._inner.wait(timeout))

    def delete(self) -> None:
        self._loop.run(self._inner.delete())


def _opened_by(build: Callable[P, async_client.Client]) -> Callable[P, Client]:
    """The sync client opened as ``build`` opens the asynchronous one: with its parameters and
    its documentation, so the facade cannot drift from the client it runs."""

    @functools.wraps(build)
    def opened(*args: P.args, **kwargs: P.kwargs) -> Client:
        settings = kwargs.get("settings")
        return Client(
            lambda: build(*args, **kwargs),
            settings=settings if isinstance(settings, ClientSettings) else None,
        )

    return opened


class Client:
    """:class:`agentpool.client.Client` without ``await``; use it as ``with``, or
    :meth:`close` it."""

    def __init__(
        self,
        make: Callable[[], async_client.Client],
        *,
        settings: ClientSettings | None = None,
    ) -> None:
        settings = settings or ClientSettings()
        self._loop = _Loop(cancel_wait=settings.cancel_wait_seconds)
        try:
            self._client = self._loop.run(_made(make))
        except BaseException:
            self._loop.close()
            raise

    from_kubeconfig = staticmethod(_opened_by(async_client.Client.from_kubeconfig))
    in_cluster = staticmethod(_opened_by(async_client.Client.in_cluster))

    @property
    def namespace(self) -> str:
        return self._client.namespace

    def close(self) -> None:
        try:
            self._loop.run(self._client.close())
        finally:
            self._loop.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @contextlib.contextmanager
    def lease(self, pool: str, **options: Any) -> Iterator[LeasedAgent]:
        """As :meth:`agentpool.client.Client.lease`, for a ``with`` block."""
        manager = self._client.lease(pool, **options)
        agent = self._loop.run(manager.__aenter__())
        try:
            yield LeasedAgent(agent, self._loop)
        except Exception as error:
            if not self._loop.run(manager.__aexit__(type(error), error, error.__traceback__)):
                raise
        except BaseException:
            # KeyboardInterrupt and SystemExit would stop the loop's thread if raised on it: the
            # lease is released as on a normal exit, and the interrupt goes on here.
            self._loop.run(manager.__aexit__(None, None, None))
            raise
        else:
            self._loop.run(manager.__aexit__(None, None, None))

    def call(self, pool: str, item: Any, **options: Any) -> Any:
        return self._loop.run(self._client.call(pool, item, **options))

    def cast(self, pool: str, item: Any, **options: Any) -> str:
        return self._loop.run(self._client.cast(pool, item, **options))

    def submit(
        self,
        pool: str,
        items: Sequence[Any] | None = None,
        *,
        source: Source | Mapping[str, Any] | None = None,
        cap: int = 1,
        mode: RunMode = "Call",
        failures: FailurePolicy = "Fail",
        **options: Any,
    ) -> Run:
        run = self._loop.run(
            self._client.submit(
                pool, items, source=source, cap=cap, mode=mode, failures=failures, **options
            )
        )
        return Run(run, self._loop)

    def run(self, name: str) -> Run:
        return Run(self._loop.run(self._client.run(name)), self._loop)

    def pool_status(self, pool: str) -> AgentPoolStatus:
        return self._loop.run(self._client.pool_status(pool))


async def _next(stream: AsyncIterator[T]) -> T:
    return await anext(stream)


async def _made(make: Callable[[], async_client.Client]) -> async_client.Client:
    # Built on the loop that will use it, as an asyncio object should be.
    return make()
