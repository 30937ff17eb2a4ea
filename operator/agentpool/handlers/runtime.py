"""The operator's in-memory state, shared by its handlers.

One :class:`Runtime` per running operator holds the API and agent clients and, per AgentPool, a
:class:`PoolHandle`: the pool's broker, the pods last seen by the watch, and the event that wakes
the pool's reconcile loop. Handlers receive it by closure when they are registered.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from agentpool.broker import Broker, Brokers, Checkout
from agentpool.io.agents import AgentClient
from agentpool.io.journal import Journals
from agentpool.io.kube import Kube
from agentpool.pool import DemandSample
from agentpool.pool.backoff import Backoff
from agentpool.pool.pods import PodFailure

PoolKey = tuple[str, str]


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
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    # When the operator first saw each pod Ready, to tell "turned unready" from "never ready".
    first_ready: dict[str, float] = field(default_factory=dict)
    history: list[DemandSample] = field(default_factory=list)
    # Retired agents whose pods are still to be deleted.
    undeleted: set[str] = field(default_factory=set)
    # Failed agents' pods kept for a post-mortem, by when they failed; out of the pool already.
    kept: dict[str, float] = field(default_factory=dict)
    # When this pool's loop began: a failure before it was counted by an earlier operator.
    started_at: float = field(default_factory=time.time)
    last_status: dict[str, Any] | None = None
    last_status_at: float = 0.0
    # Agents that failed before ever turning Ready, in a row: replacements back off.
    crash_failures: int = 0
    crash_backoff_until: float = 0.0
    # The latest of them (the Degraded condition names their pods), oldest first.
    start_failures: list[PodFailure] = field(default_factory=list)
    # Agents quarantined, in a row: their replacements back off as CrashLoopBackOff does.
    quarantine_backoff: Backoff = field(default_factory=Backoff)
    # The pool was deleted and its agents drained and deleted.
    drained: bool = False
    # The last agent retired for turning unready, and when.
    last_unready: tuple[str, float] | None = None

    def poke(self) -> None:
        """Ask the pool's reconcile loop to look again."""
        self.wake.set()

    def wake_at(self, delay: float) -> None:
        """Ask the pool's reconcile loop to look again in ``delay`` seconds."""
        asyncio.get_running_loop().call_later(delay, self.wake.set)


@dataclass
class Runtime:
    kube: Kube
    agents: AgentClient
    # Where runs keep their journals; without it a crash may re-run up to a cap of finished items.
    journals: Journals | None = None
    brokers: Brokers = field(default_factory=Brokers)
    pools: dict[PoolKey, PoolHandle] = field(default_factory=dict)
    # Pools whose loop is rebuilding who is busy: pod events reach them, checkouts do not yet.
    starting: dict[PoolKey, PoolHandle] = field(default_factory=dict)
    # Deleted pools whose loop has ended, until their deletion handler has drained them.
    draining: dict[PoolKey, PoolHandle] = field(default_factory=dict)
    # Agents of Bound leases, taken back by their pool's loop for the lease daemons to pick up.
    restored_leases: dict[PoolKey, Checkout] = field(default_factory=dict)
    # Agents held by Bound leases, by lease: the lease's daemon (expiry, a lost agent) or its
    # deletion handler takes one out to return it, whichever comes first.
    held_leases: dict[PoolKey, Checkout] = field(default_factory=dict)
    # Agents found busy after a restart, released when they report idle; they outlive a
    # restarted pool loop so that such an agent is never held forever.
    restorers: set[asyncio.Task[None]] = field(default_factory=set)
    # Pods seen before their pool's loop started; the loop adopts them when it starts.
    orphan_pods: dict[PoolKey, dict[str, dict[str, Any]]] = field(default_factory=dict)
    pool_started: dict[PoolKey, asyncio.Event] = field(default_factory=dict)

    def started_event(self, key: PoolKey) -> asyncio.Event:
        event = self.pool_started.get(key)
        if event is None:
            event = self.pool_started[key] = asyncio.Event()
        return event

    async def wait_pool(self, key: PoolKey, timeout: float) -> PoolHandle | None:
        """The pool's handle once its loop runs, or None if it does not start in time."""
        handle = self.pools.get(key)
        if handle is not None:
            return handle
        try:
            await asyncio.wait_for(self.started_event(key).wait(), timeout)
        except TimeoutError:
            return None
        return self.pools.get(key)
