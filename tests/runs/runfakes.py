"""Fakes for the run engine's injected parts: a broker, an agent client, a sink, and a journal
whose operator can be killed.

They go by the clock they are given, the tests' :class:`clocks.LoopClock`: on a test marked
``looptime``, time moves only when every task is waiting, and then straight to the next timer,
so call durations, back-offs and status intervals cost no real time.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentpool.api import (
    NameRef,
    PoolRunSpec,
    PoolRunStatus,
    RawRunStatus,
    Routes,
    Source,
    parse_spec,
)
from agentpool.io.journal import FileJournal
from agentpool.pool.checkin import CheckoutTimedOut, PoolNotFound
from agentpool.runs.config import RunConfig, config_from_spec
from agentpool.runs.contracts import (
    CheckoutTerms,
    Clock,
    ItemRequest,
    ProtocolMismatch,
    SystemClock,
)
from agentpool.runs.engine import RunEngine
from agentpool.runs.journaling import Recorder
from agentpool.runs.reporting import Reporter
from agentpool.runs.requests import mismatch
from agentpool.runs.retries import Retries
from agentpool.runs.shared import RunShared
from agentpool.runs.status import RunLedger
from agentpool.runs.waits import WaitNotes, Waits
from agentpool.settings import RunSettings
from agentpool.wire.envelopes import EnvelopeBody


def stored(status: dict[str, Any]) -> PoolRunStatus:
    """A run's status as the API server stored it, read as the operator reads it on a restart."""
    return parse_spec(PoolRunStatus, status, root="status")


async def run_until_crash(engine: RunEngine, crashed: asyncio.Event) -> None:
    """Run ``engine`` until ``crashed`` is set, then stop it mid-run, as a killed operator."""
    task = asyncio.ensure_future(engine.run())
    await crashed.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


@dataclass
class FakeCheckout:
    pool: str
    agent: str


class FakeDispatcher:
    """A broker over pools of agents: ``pools`` maps a pool to its number of Ready agents.

    As the operator's does, a checkout from a pool that does not exist says so through its
    ``waiting`` at once, then waits up to its timeout for the pool (:meth:`add_pool`)."""

    def __init__(self, clock: Clock, pools: dict[str, int]) -> None:
        self._clock = clock
        self.pools: dict[str, int] = {}
        self.idle: dict[str, list[str]] = {}
        self.waiters: dict[str, deque[asyncio.Future[str]]] = {}
        self._added: dict[str, asyncio.Event] = {}
        for pool, size in pools.items():
            self.add_pool(pool, size)
        self.held: set[str] = set()
        self.most_held = 0
        self.checkins: list[tuple[str, str]] = []
        #: Each pool's spec.protocol where it is not the agent protocol's.
        self.protocols: dict[str, str] = {}

    def add_pool(self, pool: str, size: int) -> None:
        self.pools[pool] = size
        self.idle[pool] = [f"{pool}-{n}" for n in range(size)]
        self.waiters[pool] = deque()
        self._added.setdefault(pool, asyncio.Event()).set()

    async def checkout(self, terms: CheckoutTerms, *, waiting: Any = None) -> FakeCheckout:
        pool, timeout = terms.pool, terms.timeout
        if pool not in self.pools:
            if waiting is not None:
                waiting.begin(f"pool/{pool}", "PoolNotFound", f'pool "{pool}" not found')
            added = asyncio.ensure_future(self._added.setdefault(pool, asyncio.Event()).wait())
            timer = asyncio.ensure_future(self._clock.sleep(timeout))
            await asyncio.wait({added, timer}, return_when=asyncio.FIRST_COMPLETED)
            added.cancel()
            timer.cancel()
            if pool not in self.pools:
                raise PoolNotFound(f'pool "{pool}" not found')
            if waiting is not None:
                waiting.end(f"pool/{pool}")
        refusal = mismatch(pool, self.protocols.get(pool, "Agentpool"), speaks=terms.speaks)
        if refusal is not None:
            raise ProtocolMismatch(refusal)
        if self.idle[pool]:
            return self._hand(pool, self.idle[pool].pop())
        if timeout <= 0:
            raise CheckoutTimedOut(f'pool "{pool}" has no idle agent')
        waiter: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.waiters[pool].append(waiter)
        timer = asyncio.ensure_future(self._clock.sleep(timeout))
        either: set[asyncio.Future[Any]] = {waiter, timer}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        timer.cancel()
        if waiter.done():
            return self._hand(pool, waiter.result())
        self.waiters[pool].remove(waiter)
        raise CheckoutTimedOut(
            f'pool "{pool}" exhausted after {timeout:g}s: {self.pools[pool]} agents, 0 ready'
        )

    def _hand(self, pool: str, agent: str) -> FakeCheckout:
        self.held.add(agent)
        self.most_held = max(self.most_held, len(self.held))
        return FakeCheckout(pool=pool, agent=agent)

    async def checkin(self, checkout: FakeCheckout, outcome: str) -> None:
        self.held.discard(checkout.agent)
        self.checkins.append((checkout.agent, outcome))
        waiters = self.waiters[checkout.pool]
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(checkout.agent)
                return
        self.idle[checkout.pool].append(checkout.agent)


@dataclass(frozen=True)
class Result:
    ok: bool
    output: Any = None
    reason: str = ""
    message: str = ""
    lost: bool = False


Behaviour = Callable[[EnvelopeBody, str], tuple[float, Result]]


def echo(duration: float = 0.1) -> Behaviour:
    """Every item succeeds after ``duration`` with ``{"echo": item}``."""
    return lambda envelope, agent: (duration, Result(ok=True, output={"echo": envelope["item"]}))


@dataclass
class FakeInvoker:
    """An agent client whose agents behave as ``behaviour`` says; it counts every call."""

    clock: Clock
    behaviour: Behaviour
    calls: list[tuple[str, int, str]] = field(default_factory=list)
    runs: dict[str, int] = field(default_factory=dict)
    active: int = 0
    most_active: int = 0
    envelopes: list[EnvelopeBody] = field(default_factory=list)
    on_call: Callable[[int], None] | None = None
    #: The operator was killed: it calls no agent any more (a call hangs until cancelled, and
    #: counts for nothing).
    halted: bool = False

    async def invoke(
        self, checkout: FakeCheckout, envelope: EnvelopeBody, *, timeout: float, cast: bool
    ) -> Result:
        if self.halted:
            await asyncio.get_running_loop().create_future()
        key = envelope["id"]
        self.calls.append((key, envelope["attempt"], checkout.agent))
        self.envelopes.append(envelope)
        self.runs[key] = self.runs.get(key, 0) + 1
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        try:
            duration, result = self.behaviour(envelope, checkout.agent)
            await self.clock.sleep(duration)
            return result
        finally:
            self.active -= 1
            if self.on_call is not None:
                self.on_call(len(self.calls))


@dataclass
class Dispatching:
    """A run's dispatcher made of a fake broker's checkouts and a fake agent client's calls,
    the two halves the operator's dispatcher joins."""

    broker: Any
    agents: Any

    async def checkout(self, terms: CheckoutTerms, *, waiting: Any = None) -> Any:
        return await self.broker.checkout(terms, waiting=waiting)

    async def checkin(self, checkout: Any, outcome: Any) -> None:
        await self.broker.checkin(checkout, outcome)

    async def invoke(
        self, checkout: Any, envelope: EnvelopeBody, *, timeout: float, cast: bool
    ) -> Any:
        return await self.agents.invoke(checkout, envelope, timeout=timeout, cast=cast)

    async def send(
        self, checkout: Any, request: ItemRequest, *, timeout: float, attempt: int
    ) -> Any:
        return await self.agents.send(checkout, request, timeout=timeout, attempt=attempt)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies it to status."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


@dataclass
class FakeSink:
    """The run's status as the API server would hold it, its ConfigMaps and its Events."""

    status: dict[str, Any] = field(default_factory=dict)
    configmaps: dict[str, dict[str, str]] = field(default_factory=dict)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    writes: int = 0
    configmap_writes: int = 0
    frozen: bool = False
    largest_status: int = 0
    patches: list[RawRunStatus] = field(default_factory=list)
    """Every status write, as it was patched."""

    async def write(self, patch: RawRunStatus) -> None:
        if self.frozen:
            return
        json.dumps(patch)
        self.patches.append(patch)
        self.status = merge_patch(self.status, patch)
        self.writes += 1
        self.largest_status = max(self.largest_status, len(json.dumps(self.status)))

    async def write_results_configmap(self, name: str, data: dict[str, str]) -> None:
        if self.frozen:
            return
        self.configmaps[name] = dict(data)
        self.configmap_writes += 1

    async def event(self, type: str, reason: str, message: str) -> None:
        if not self.frozen:
            self.events.append((type, reason, message))

    def reasons(self) -> list[str]:
        return [reason for _, reason, _ in self.events]

    def result_configmaps(self) -> list[dict[str, str]]:
        return [self.configmaps[ref["name"]] for ref in self.status.get("resultRefs", [])]


class KilledJournal:
    """A journal whose process dies at ``kill()``: what it held unflushed is lost, and nothing
    it is asked afterwards happens. ``safe`` names the items whose result reached the file."""

    def __init__(self, path: Path) -> None:
        self.inner = FileJournal(path)
        self.dead = False
        self.pending: list[dict[str, Any]] = []
        self.safe: set[str] = set()

    def kill(self) -> None:
        self.dead = True

    def load(self) -> list[Mapping[str, Any]]:
        return self.inner.load()

    def append(self, entry: dict[str, Any] | str) -> None:
        if not self.dead:
            self.pending.append(json.loads(entry) if isinstance(entry, str) else entry)

    def flush(self) -> None:
        if self.dead:
            return
        for entry in self.pending:
            self.inner.append(entry)
            if "attempt" not in entry:
                self.safe.add(entry["id"])
        self.pending = []
        self.inner.flush()

    def seal(self) -> int:
        self.flush()
        return -1 if self.dead else self.inner.seal()

    def release(self, mark: int) -> None:
        if not self.dead:
            self.inner.release(mark)

    def discard(self) -> None:
        if not self.dead:
            self.inner.discard()

    def close(self) -> None:
        pass


def crash_after(
    calls: int,
    sink: FakeSink,
    journal: KilledJournal | None,
    invoker: FakeInvoker,
    crashed: asyncio.Event,
) -> Callable[[int], None]:
    """An ``on_call`` that kills the operator as the ``calls``-th call returns: that item finished
    on its agent but reached neither status nor the journal, and no further call is made."""

    def crash_at(made: int) -> None:
        if made >= calls and not crashed.is_set():
            sink.frozen = True
            if journal is not None:
                journal.kill()
            invoker.halted = True
            crashed.set()

    return crash_at


def run_shared(
    ledger: RunLedger | None = None,
    *,
    clock: Clock | None = None,
    wake: Callable[[], None] = lambda: None,
    changed: Callable[[], None] = lambda: None,
) -> RunShared:
    """What the parts of a run without a journal share, as the engine makes it, for tests of
    the parts: a fresh ledger of run "run" and the real clock unless given; waits are noted and
    read by nobody; wake and changed do nothing unless given."""
    ledger = ledger if ledger is not None else RunLedger(run="run", replayable=True)
    clock = clock if clock is not None else SystemClock()
    return RunShared(
        clock=clock,
        ledger=ledger,
        records=Recorder(ledger, None),
        waiting=WaitNotes(Waits(), clock, changed),
        wake=wake,
        changed=changed,
    )


def run_parts(
    config: RunConfig, ledger: RunLedger, clock: Clock
) -> tuple[RunShared, Reporter, Retries]:
    """What the parts share, the reporter and the retries of a run without a journal, wired as
    the engine wires them, for tests of the parts that take them."""
    shared = run_shared(ledger, clock=clock)
    report = Reporter(
        shared, sink=FakeSink(), status=PoolRunStatus(), interval=1.0, failure_event_interval=5.0
    )
    retries = Retries(config, shared, report=report, refused_max=RunSettings().refused_max_seconds)
    return shared, report, retries


def run_config(
    name: str,
    *,
    pool: str | None = None,
    routes: Routes | None = None,
    rerun_limit: int | None = None,
    **fields: Any,
) -> RunConfig:
    """The config of run ``name`` as the daemon resolves it from a spec that sets ``pool`` (or
    ``routes``) and ``fields`` (snake_case, as the model names them), over an empty source: the
    engine is handed its source apart. No pool is found, so timeouts are the run's or the
    default."""
    spec = PoolRunSpec(
        pool_ref=NameRef(name=pool) if pool is not None else None,
        routes=routes,
        source=Source(items=[]),
        **fields,
    )
    config = config_from_spec(name, spec, pools={})
    return dataclasses.replace(config, rerun_limit=rerun_limit)
