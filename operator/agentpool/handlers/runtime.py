"""The operator's in-memory state, shared by its handlers.

One :class:`Runtime` per running operator holds the API and agent clients, the clock the lease
handlers go by (:class:`~agentpool.runs.Clock`) and, apart by concern,
what the handlers remember between events: the pools (:class:`Pools`, a :class:`PoolHandle` each:
the pool's broker, the pods last seen by the watch, the event that wakes its reconcile loop), the
agents Bound leases hold (:class:`LeaseAgents`), the running runs' engines (:class:`RunEngines`)
and the tasks that hold agents found busy after a restart. Handlers are module-level coroutines
that take it as their first argument, positional-only since kopf passes a ``runtime`` keyword
of its own (how long the handler has run); each module's ``register`` binds it with
:func:`functools.partial` (through :class:`~agentpool.handlers.registration.KindHandlers` for
agentpool's own kinds) when :mod:`agentpool.handlers.operator` builds the registry.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from agentpool.api import AgentPoolSpec
from agentpool.api.raw import RawBody
from agentpool.broker import Broker, Brokers, Checkout
from agentpool.broker.registry import PoolKey
from agentpool.handlers.listings import Listings
from agentpool.io.agents import AgentClient
from agentpool.io.events import EventSeries
from agentpool.io.journal import Journals
from agentpool.io.kube import Kube
from agentpool.pool import DemandSample
from agentpool.pool.headroom import HeadroomState
from agentpool.pool.health import PoolHealth
from agentpool.pool.placement import (
    HANDOVER_ANNOTATION,
    REPLICA_LABEL,
    Assign,
    Follower,
    HandOver,
    Placed,
    Sightings,
    Write,
)
from agentpool.pool.rollout import RolloutMark
from agentpool.runs import Clock, SystemClock
from agentpool.runs.engine import RunEngine
from agentpool.settings import OperatorSettings, PoolSettings, ReplicaSettings

#: A run's or a lease's namespace and name, as a PoolKey is a pool's.
ObjectKey = tuple[str, str]


@dataclass
class PoolHandle:
    """What the operator knows about one pool between reconciles."""

    namespace: str
    name: str
    broker: Broker
    port: int
    wake: asyncio.Event
    # The pool object's uid: a pool re-created under the same name is another pool.
    uid: str = ""
    token: str = ""
    # When the token Secret was last seen to exist: it is looked for again every few seconds.
    secret_checked_at: float = 0.0
    reset_between_items: bool = False
    pods: dict[str, RawBody] = field(default_factory=dict)
    # When the operator first saw each pod Ready, to tell "turned unready" from "never ready".
    first_ready: dict[str, float] = field(default_factory=dict)
    history: list[DemandSample] = field(default_factory=list)
    # Retired agents whose pods are still to be deleted.
    undeleted: set[str] = field(default_factory=set)
    # Uids of pods the watch said were deleted before the pool knew them (their create's answer
    # still on its way): that answer must not bring them back.
    deleted_unknown: set[str] = field(default_factory=set)
    # Failed agents' pods kept for a post-mortem, by when they failed; out of the pool already.
    kept: dict[str, float] = field(default_factory=dict)
    # When this pool's loop began: a failure before it was counted by an earlier operator.
    started_at: float = field(default_factory=time.time)
    last_status: dict[str, Any] | None = None
    last_status_at: float = 0.0
    # Start-up failures, quarantines and readiness lost: back-off and the Degraded condition.
    health: PoolHealth = field(default_factory=PoolHealth)
    # The pool was deleted and its agents drained and deleted.
    drained: bool = False
    # The operator's pool tunables, as this pool's loop goes by them.
    settings: PoolSettings = field(default_factory=PoolSettings)
    # The spec as the last pass read it: the gateway's calls take their defaults from it.
    spec: AgentPoolSpec = field(default_factory=AgentPoolSpec)
    # Gateway calls and casts waiting in the broker's line now, for the metric.
    gateway_waiting: int = 0
    # The last readiness probe error of each agent past the probe threshold, from its pod's
    # Unhealthy Events, and when they were last listed (None: not since all agents were fine).
    probe_errors: dict[str, str] = field(default_factory=dict)
    probe_events_at: float | None = None
    # Where the pool's rollout last moved, for the Progressing condition's deadline.
    rollout: RolloutMark | None = None
    # The template hash whose pod the API server last judged by a dry run.
    checked_template: str | None = None
    # With headroom Auto: the minIdle in force and the advice and changes it was decided from.
    headroom: HeadroomState = field(default_factory=HeadroomState)
    # The last pass found the pool steady (see agentpool.pool.passes): it looks again only
    # ``quiet_pass_seconds`` later, or when something happens to it.
    quiet: bool = False

    def poke(self) -> None:
        """Ask the pool's reconcile loop to look again."""
        self.wake.set()

    def wake_at(self, delay: float) -> None:
        """Ask the pool's reconcile loop to look again in ``delay`` seconds."""
        asyncio.get_running_loop().call_later(delay, self.wake.set)


@dataclass
class Pools:
    """Every pool's handle through its life, by (namespace, name): starting, served, draining."""

    # Pools whose loop runs: checkouts find them here.
    served: dict[PoolKey, PoolHandle] = field(default_factory=dict)
    # Pools whose loop is rebuilding who is busy: pod events reach them, checkouts do not yet.
    starting: dict[PoolKey, PoolHandle] = field(default_factory=dict)
    # Deleted pools whose loop has ended, until their deletion handler has drained them.
    draining: dict[PoolKey, PoolHandle] = field(default_factory=dict)
    # Pods seen before their pool's loop started; the loop adopts them when it starts.
    orphan_pods: dict[PoolKey, dict[str, RawBody]] = field(default_factory=dict)
    # Uids of pods deleted before their pool was served: its listing must not bring them back.
    deleted_pods: dict[PoolKey, set[str]] = field(default_factory=dict)
    started: dict[PoolKey, asyncio.Event] = field(default_factory=dict)
    # Set once the served handle is dropped, for those waiting on it (:meth:`dropped`).
    dropping: dict[PoolKey, asyncio.Event] = field(default_factory=dict)
    # This operator serves no pool it does not serve already (:meth:`stop_waiting`).
    stopped: bool = False

    def get(self, key: PoolKey) -> PoolHandle | None:
        """The served pool's handle, or None when its loop does not run (yet)."""
        return self.served.get(key)

    def __setitem__(self, key: PoolKey, handle: PoolHandle) -> None:
        self.served[key] = handle

    def __contains__(self, key: object) -> bool:
        return key in self.served

    def __len__(self) -> int:
        return len(self.served)

    def watched(self, key: PoolKey) -> PoolHandle | None:
        """The handle pod events go to: the served pool's, or that of one starting."""
        return self.served.get(key) or self.starting.get(key)

    def serve(self, handle: PoolHandle) -> None:
        """The pool's loop runs: checkouts find it from now on, and those waiting are woken."""
        key = (handle.namespace, handle.name)
        self.served[key] = handle
        self.started_event(key).set()

    def forget(self, handle: PoolHandle) -> None:
        """Drop this pool's handle, but never that of a new pool created since under its name."""
        key = (handle.namespace, handle.name)
        if self.served.get(key) is handle:
            del self.served[key]
            self.started.pop(key, None)
            if (dropped := self.dropping.pop(key, None)) is not None:
                dropped.set()

    async def dropped(self, handle: PoolHandle, timeout: float) -> None:
        """Until ``handle`` is no longer the one served (its loop ended), for up to
        ``timeout``."""
        key = (handle.namespace, handle.name)
        if self.served.get(key) is not handle:
            return
        event = self.dropping.setdefault(key, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)

    def stop_waiting(self) -> None:
        """Every wait for a pool to be served ends now, served or not: this operator serves
        none it does not serve already (a replica that leaves), nor will a wait begun later."""
        self.stopped = True
        for event in self.started.values():
            event.set()

    def started_event(self, key: PoolKey) -> asyncio.Event:
        """The event set once the pool's loop runs."""
        event = self.started.get(key)
        if event is None:
            event = self.started[key] = asyncio.Event()
        return event

    async def wait(self, key: PoolKey, timeout: float) -> PoolHandle | None:
        """The pool's handle once its loop runs, or None if it does not start in time."""
        handle = self.served.get(key)
        if handle is not None or self.stopped:
            return handle
        try:
            await asyncio.wait_for(self.started_event(key).wait(), timeout)
        except TimeoutError:
            return None
        return self.served.get(key)


def _set(event: asyncio.Event) -> asyncio.Event:
    event.set()
    return event


class LeaseStop:
    """Asks a lease's task to end: because its lease was deleted, or because the operator stops
    (the lease then stays Bound, for the next task to take up)."""

    def __init__(self) -> None:
        self._asked = asyncio.Event()
        self.deleted = False

    def __bool__(self) -> bool:
        return self._asked.is_set()

    def set(self, *, deleted: bool) -> None:
        self.deleted = self.deleted or deleted
        self._asked.set()

    async def wait(self) -> None:
        await self._asked.wait()


@dataclass
class LeaseTask:
    """The task that binds and holds one lease's agent, and what asks it to end."""

    task: asyncio.Task[None]
    stop: LeaseStop


@dataclass
class LeaseAgents:
    """The agents of Bound leases, by lease (namespace, name)."""

    # Taken back by their pool's loop after a restart, for the lease tasks to pick up.
    restored: dict[ObjectKey, Checkout] = field(default_factory=dict)
    # Held by a running lease task: the task (expiry, a lost agent) or the lease's deletion
    # takes one out to return it, whichever comes first.
    held: dict[ObjectKey, Checkout] = field(default_factory=dict)
    # A lease's binding is opened, renewed and closed one step at a time, so an unbind never
    # overtakes a bind still in flight (which would leave the agent bound to a lease gone).
    locks: dict[ObjectKey, asyncio.Lock] = field(default_factory=dict)
    # Set when a lease object changes (its holder renewed it), to wake the task holding it.
    wakes: dict[ObjectKey, asyncio.Event] = field(default_factory=dict)
    # The running tasks, and each lease as last seen on the watch (its holder's renewTime).
    tasks: dict[ObjectKey, LeaseTask] = field(default_factory=dict)
    latest: dict[ObjectKey, RawBody] = field(default_factory=dict)
    # Set while the operator acts; clear while it is paused (a peer acting in its place) or
    # exits, until it serves a pool again or its peering object says it acts.
    acting: asyncio.Event = field(default_factory=lambda: _set(asyncio.Event()))

    @property
    def paused(self) -> bool:
        """The operator does not act now: its leases are the acting replica's to drive."""
        return not self.acting.is_set()

    def take(self, key: ObjectKey) -> Checkout | None:
        """The lease's agent, held or restored, now the caller's to return; None if neither."""
        return self.held.pop(key, None) or self.restored.pop(key, None)

    def lock(self, key: ObjectKey) -> asyncio.Lock:
        """The lock one lease's binding steps take."""
        return self.locks.setdefault(key, asyncio.Lock())

    def wake(self, key: ObjectKey) -> asyncio.Event:
        """The event that wakes the lease's task when the lease changes."""
        return self.wakes.setdefault(key, asyncio.Event())

    def forget(self, key: ObjectKey) -> None:
        """The lease is done with its agent: drop its lock and wake-up (a holder of the lock
        keeps its own)."""
        self.locks.pop(key, None)
        self.wakes.pop(key, None)

    def park(self, key: ObjectKey) -> None:
        """The lease's task stops but the lease stays Bound: its agent waits for the next."""
        checkout = self.held.pop(key, None)
        if checkout is not None:
            self.restored[key] = checkout

    def pause(self) -> None:
        """The operator is paused, a peer acting in its place, or exits: every lease task ends
        as at a stop, without waiting, its lease left Bound and its agent parked (the watches
        end, kopf's or the operator's own, so a task would not see its holder's renewals and
        would expire a lease still held). The replica that acts next drives the leases; a
        resumed operator takes up each lease its watch shows again; a task started meanwhile
        waits for :meth:`resume`."""
        self.acting.clear()
        for entry in self.tasks.values():
            entry.stop.set(deleted=False)

    def resume(self) -> None:
        """The operator acts again (it serves a pool, or its peering object says it acts)."""
        self.acting.set()

    async def stop_all(self, timeout: float) -> None:
        """The operator stops: every lease task ends, leaving its lease Bound for the next
        operator; one still running after ``timeout`` seconds is cancelled."""
        running = [entry.task for entry in self.tasks.values()]
        for entry in self.tasks.values():
            entry.stop.set(deleted=False)
        if running:
            _, late = await asyncio.wait(running, timeout=timeout)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late)


@dataclass
class RunEngines:
    """The engines of the runs this operator drives, by run (namespace, name)."""

    engines: dict[ObjectKey, RunEngine] = field(default_factory=dict)
    # The generation and spec.source digest each running run started on.
    pinned: dict[ObjectKey, tuple[int, str]] = field(default_factory=dict)
    # Each running engine's task, and the pool the run follows (its first).
    tasks: dict[ObjectKey, tuple[str, asyncio.Task[Any]]] = field(default_factory=dict)

    def start(self, key: ObjectKey, engine: RunEngine, *, generation: int, digest: str) -> None:
        """The run's engine is about to run on this generation and source digest."""
        self.engines[key] = engine
        self.pinned[key] = (generation, digest)

    def running(self, key: ObjectKey, pool: str, task: asyncio.Task[Any]) -> None:
        """The run's engine runs as ``task``, following ``pool``."""
        self.tasks[key] = (pool, task)

    def end(self, key: ObjectKey, engine: RunEngine) -> None:
        """The engine ended; unless a run made again under its name has its own by now."""
        if self.engines.get(key) is engine:
            del self.engines[key]
            self.pinned.pop(key, None)
            self.tasks.pop(key, None)

    def stop(self, key: ObjectKey) -> None:
        """Stop the run's engine, once it wrote what it has done (a run gone elsewhere)."""
        running = self.tasks.get(key)
        if running is not None:
            running[1].cancel()

    async def park(self, namespace: str, pool: str) -> None:
        """Stop the engines of the runs that follow ``pool``, each once it wrote what it has
        done, so the replica the pool goes to resumes them from there."""
        ending = [
            task
            for (run_namespace, _), (followed, task) in self.tasks.items()
            if run_namespace == namespace and followed == pool and not task.done()
        ]
        for task in ending:
            task.cancel()
        if ending:
            await asyncio.wait(ending)


@dataclass
class GatewayPublication:
    """What the operator tells every namespace with a pool about its gateway."""

    url: str
    ca_pem: bytes
    # Where the other replicas reach this gateway (this pod's own address).
    own: str = ""
    # When each namespace's ConfigMap is next looked at (monotonic seconds).
    checked: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Sharing:
    """This replica among those that share the pools: the group's name (its Leases are named
    after it and labelled with it), the namespace of the Leases, and this replica's identity
    (its Lease's holder and the value of the replica label on what it works on)."""

    name: str
    namespace: str
    identity: str
    #: How long a replica's Lease lasts from its last renewal: how soon a crashed replica's
    #: pools go to the others.
    lease_seconds: int = ReplicaSettings.lease_seconds

    @property
    def member_lease(self) -> str:
        return f"{self.name}-{self.identity}"

    @property
    def assigner_lease(self) -> str:
        return f"{self.name}-assigner"


@dataclass
class Placements:
    """The pools, runs and leases as this replica's watches last showed them, with the replica
    label each carries: what the assigner places, whichever replica it is."""

    pools: dict[PoolKey, Placed] = field(default_factory=dict)
    followers: dict[tuple[str, str, str], Follower] = field(default_factory=dict)
    # The live replicas' gateways, by replica, as their Leases say.
    gateways: dict[str, str] = field(default_factory=dict)
    # When this replica saw each Lease of the group renewed, by its own clock.
    sightings: Sightings = field(default_factory=Sightings)
    # This replica's Lease was written: the others count it among them (it is Ready from then).
    joined: bool = False
    # This replica has given its Leases up (it exits): it renews and takes none again.
    left: bool = False
    # Pools that left this replica's own watch (relabelled away): their loops end here. kopf
    # stops no daemon of an object that only left its watch, and gives it the object as it
    # last matched, which still names this replica.
    gone: set[PoolKey] = field(default_factory=set)
    # Set when something to place may have changed.
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def see_pool(self, key: PoolKey, meta: Any, *, deleted: bool) -> None:
        placed = None if deleted else Placed(*placed_of(meta))
        if self.pools.get(key) != placed:
            if placed is None:
                self.pools.pop(key, None)
            else:
                self.pools[key] = placed
            self.changed.set()

    def see_follower(self, follower: Follower, *, deleted: bool) -> None:
        key = (follower.kind, follower.namespace, follower.name)
        if deleted:
            if self.followers.pop(key, None) is not None:
                self.changed.set()
        elif self.followers.get(key) != follower:
            self.followers[key] = follower
            self.changed.set()

    def forget(self, write: Write) -> None:
        """What ``write`` was for is gone: out of the view."""
        if isinstance(write, Assign | HandOver):
            self.pools.pop(write.key, None)
        else:
            follower = write.follower
            self.followers.pop((follower.kind, follower.namespace, follower.name), None)

    def wrote(self, write: Write) -> None:
        """``write`` was made: the view shows it before the watch does."""
        if isinstance(write, Assign):
            self.pools[write.key] = Placed(owner=write.owner)
        elif isinstance(write, HandOver):
            self.pools[write.key] = dataclasses.replace(self.pools[write.key], handover=write.to)
        else:
            follower = dataclasses.replace(write.follower, owner=write.owner)
            self.followers[follower.kind, follower.namespace, follower.name] = follower


def placed_of(meta: Any) -> tuple[str | None, str | None]:
    """An object's replica label and handover annotation, from its metadata."""
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    return labels.get(REPLICA_LABEL), annotations.get(HANDOVER_ANNOTATION)


@dataclass
class Runtime:
    """Everything one running operator's handlers share."""

    kube: Kube
    agents: AgentClient
    # Where runs keep their journals; without it a crash may re-run up to a cap of finished items.
    journals: Journals | None = None
    brokers: Brokers = field(default_factory=Brokers)
    pools: Pools = field(default_factory=Pools)
    leases: LeaseAgents = field(default_factory=LeaseAgents)
    runs: RunEngines = field(default_factory=RunEngines)
    settings: OperatorSettings = field(default_factory=OperatorSettings)
    # Agents found busy after a restart, released when they report idle; they outlive a
    # restarted pool loop so that such an agent is never held forever.
    restorers: set[asyncio.Task[None]] = field(default_factory=set)
    # Agents whose item still runs after their holder let go (a cast, a caller gone mid-call),
    # each given back by a task once the agent reports the item done.
    returning: set[asyncio.Task[None]] = field(default_factory=set)
    # The gateway's URL and CA once it listens, for the namespaces' ConfigMaps.
    gateway: GatewayPublication | None = None
    # This replica acts (it is not a standby paused by its peers): its gateway takes calls.
    serving: bool = True
    # Lets the calls the gateway serves end, taking no new one, as the operator stops.
    drain_gateway: Callable[[], Awaitable[None]] | None = None
    # Bounds the restart's ``GET /status`` calls across all pools (made on first use, in the loop).
    status_gate: asyncio.Semaphore | None = None
    # The wall time the lease handlers read and wait on: a lease's term, its renewals, the
    # stamps of its conditions. Tests give one that runs on the event loop's (fake) time.
    clock: Clock = field(default_factory=SystemClock)
    # The Events about pools that their leases make (bound, expired), one write a window.
    lease_events: EventSeries = field(init=False)
    # The LISTs of pods and leases that starting pools share (after a restart, all at once).
    listings: Listings = field(init=False)
    # With replicas sharing the pools: this replica, and what it saw of their placement.
    sharing: Sharing | None = None
    placements: Placements = field(default_factory=Placements)

    def ready(self) -> bool:
        """Whether the gateway says Ready: acting (not a paused standby), and sharing, among
        the replicas (its Lease written, and not given up as it stops)."""
        if self.sharing is None:
            return self.serving
        return self.serving and self.placements.joined and not self.placements.left

    def elsewhere(self, key: PoolKey) -> bool:
        """Whether another replica works on the pool ``key`` (or is taking it), as the
        placements seen say: never alone."""
        placed = self.placements.pools.get(key)
        if self.sharing is None or placed is None:
            return False
        target = placed.handover or placed.owner
        return bool(target) and target != self.sharing.identity

    def works_on(self, meta: Any) -> bool:
        """Whether this replica works on the object of ``meta``: always alone; sharing, when its
        replica label names this replica and it is not being handed over."""
        if self.sharing is None:
            return True
        owner, handover = placed_of(meta)
        return owner == self.sharing.identity and handover is None

    def __post_init__(self) -> None:
        self.listings = Listings(self.kube)
        self.lease_events = EventSeries(
            self.kube, window_seconds=self.settings.leases.event_window_seconds
        )
