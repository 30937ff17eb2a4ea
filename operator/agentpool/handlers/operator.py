"""Assembles and runs the kopf operator: settings, login, and every handler of the project.

``agentpool run`` calls :func:`run_operator` in a cluster; ``agentpool local up``, ``agentpool
demo`` and the tests hand :func:`embedded_operator` to the local cluster, which runs it in process
against the kubeconfig it wrote. Each call builds its own registry, so two operators (a test that
restarts one, say) never share handlers.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import random
import re
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import kopf

from agentpool import GROUP
from agentpool.handlers import leases, leasewatch, pods, pools, replicas, runs, standby
from agentpool.handlers.gatewaysetup import (
    GatewayOptions,
    OpenGateway,
    keep_certificate,
    open_gateway,
)
from agentpool.handlers.runtime import Runtime, Sharing
from agentpool.io.agents import AgentClient
from agentpool.io.connection import Connection, credentials
from agentpool.io.journal import Journals
from agentpool.io.kube import Kube
from agentpool.settings import LeaseSettings, OperatorSettings, ReplicaSettings

PREFIX = "agentpool.dev"


class NoDiffBase(kopf.DiffBaseStorage):
    """Keeps no last-handled state: kopf sees every object as new, which no handler here
    minds, as none is called on a creation or an update. Nor does it build an essence to
    compare: kopf would deep-copy every event's body for it (and again to clear it of progress
    annotations), a pod's on each of its status changes, for nothing."""

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None
    ) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


def build_settings(*, embedded: bool, sharing: Sharing | None = None) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    if sharing is not None:
        # A replica sharing the pools watches its own only: what carries its label.
        for plural in replicas.SHARED_PLURALS:
            settings.watching.label_selectors[GROUP, plural] = replicas.selector(sharing)
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    # No handler detects changes (each follows the watched state), so kopf keeps no last-handled
    # state on objects: otherwise a kind with a deletion handler (pools, leases) gets it written
    # on creation, one more write in series before a lease is bound.
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.persistence.finalizer = f"{PREFIX}/finalizer"
    # Only agent pods matter to the operator: filter them on the server, not in Python.
    settings.watching.label_selectors["v1", "pods"] = pools.POOL_LABEL
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.posting.level = logging.INFO
    # Events say who posted them (the FROM of `kubectl describe`): this operator, not kopf, and
    # which replica, as the kube-controller-manager names its host.
    settings.posting.reporting_component = "agentpool"
    settings.posting.reporting_instance = socket.gethostname()
    settings.posting.event_name_prefix = "agentpool-"
    settings.execution.max_workers = 8
    if embedded:
        # Embedded in a larger process (the local cluster, tests): never SIGKILL the host
        # process when the operator stops some other way than through its stop flag.
        settings.process.ultimate_exiting_timeout = None
    return settings


def build_registry(
    runtime: Runtime, connection: Connection, *, kopf_leases: bool = True
) -> kopf.OperatorRegistry:
    """Every handler bound to a registry of its own; the leases' only with ``kopf_leases``
    (else the operator follows them itself: :mod:`agentpool.handlers.leasewatch`)."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        found = credentials(connection)
        return kopf.ConnectionInfo(
            server=found["server"],
            ca_path=found["ca_path"],
            insecure=found["insecure"],
            scheme=found["scheme"],
            token=found["token"],
            certificate_path=found["certificate_path"],
            private_key_path=found["private_key_path"],
            default_namespace="default",
        )

    @kopf.on.probe(id="pools", registry=registry)
    def probe_pools(**_: Any) -> int:
        return len(runtime.pools)

    @kopf.on.cleanup(registry=registry)
    async def stop_serving(**_: Any) -> None:
        # kopf has stopped every loop here. Sharing the pools, the leases are parked as their
        # tasks end, and the others take this replica's pools at once, without waiting for
        # kopf's exit. Then the gateway's calls in progress end (passed on to where their pools
        # went): here, before kopf cancels every task it did not start with.
        if runtime.sharing is not None:
            await runtime.leases.stop_all(runtime.settings.leases.stop_seconds)
            await replicas.leave(runtime, runtime.sharing)
        if runtime.drain_gateway is not None:
            await runtime.drain_gateway()

    pods.register(registry, runtime)
    pools.register(registry, runtime)
    runs.register(registry, runtime)
    if kopf_leases:
        leases.register(registry, runtime)
    return registry


async def run_operator(
    connection: Connection,
    *,
    namespaces: Collection[str] = (),
    stop_flag: asyncio.Event | None = None,
    ready_flag: asyncio.Event | None = None,
    liveness_endpoint: str | None = None,
    peering: Peering | None = None,
    embedded: bool = False,
    state_dir: Path | None = None,
    gateway: GatewayOptions | None = None,
    lease_events: bool = True,
    sharing: Sharing | None = None,
) -> None:
    """Run the operator until ``stop_flag`` is set (or, without one, until cancelled).

    ``namespaces`` limits it to those namespaces; empty means cluster-wide. ``peering`` turns
    on kopf peering so that only one of several replicas acts at a time: the one of the highest
    priority. ``state_dir`` holds the runs' journals, so that a crash re-runs only the items in
    flight. ``gateway`` opens the HTTPS gateway for calls and casts (none without it).
    ``lease_events`` False posts no Event on leases. ``sharing`` makes it one of several
    replicas that share the pools (:mod:`agentpool.handlers.replicas`); not with ``peering``.
    """
    # What is opened is closed, last first, each whether or not the one before it failed.
    async with contextlib.AsyncExitStack() as opened:
        runtime = await open_runtime(opened, connection, state_dir, lease_events, sharing)
        lease_paths = leasewatch.own_paths(
            runtime, peering=bool(peering or sharing), namespaces=namespaces
        )
        registry = build_registry(runtime, connection, kopf_leases=not lease_paths)
        async with beside_kopf(runtime, gateway, peering, namespaces, lease_paths):
            await kopf.operator(
                registry=registry,
                settings=build_settings(embedded=embedded, sharing=sharing),
                clusterwide=not namespaces,
                namespaces=list(namespaces),
                standalone=peering is None,
                peering_name=peering.name if peering else None,
                priority=peering.priority if peering else None,
                # kopf types it as its own Identity, a NewType of str it does not export.
                identity=cast(Any, peering.identity) if peering else None,
                stop_flag=stop_flag,
                ready_flag=ready_flag,
                liveness_endpoint=liveness_endpoint,
            )


async def open_runtime(
    opened: contextlib.AsyncExitStack,
    connection: Connection,
    state_dir: Path | None,
    lease_events: bool,
    sharing: Sharing | None,
) -> Runtime:
    """The operator's runtime, its clients opened, each closed by ``opened``."""
    kube = Kube.connect(connection)
    opened.push_async_callback(kube.aclose)
    await kube.open_session()
    agents = AgentClient()
    opened.push_async_callback(agents.close)
    journals = Journals(state_dir) if state_dir is not None else None
    tunables = OperatorSettings(leases=LeaseSettings(events=lease_events))
    if sharing is not None:
        # Renewed five times a Lease's duration, the assigner's as each replica's: one slow or
        # failed renewal does not lapse it.
        seconds = sharing.lease_seconds
        membership = ReplicaSettings(
            lease_seconds=seconds,
            renew_seconds=seconds / 5,
            assign_seconds=min(ReplicaSettings.assign_seconds, seconds / 5),
        )
        tunables = dataclasses.replace(tunables, replicas=membership)
    runtime = Runtime(
        kube=kube, agents=agents, journals=journals, settings=tunables, sharing=sharing
    )
    opened.push_async_callback(runtime.lease_events.close)
    return runtime


@dataclass(frozen=True)
class Peering:
    """This replica among its peers: the peering object's name, and how kopf knows it."""

    name: str
    identity: str
    priority: int

    @classmethod
    def of(cls, name: str, priority: int | None = None) -> Peering:
        # kopf pauses every peer whose priority equals another live peer's: unless told one,
        # each replica draws its own, so exactly one (the highest) acts at a time; the gateway's
        # readiness follows.
        identity = replica_identity()
        return cls(name, identity, random.randint(1, 2**31) if priority is None else priority)


def replica_identity() -> str:
    """How this replica is known to its peers: its pod's name, else its host and process."""
    return os.environ.get("POD_ID") or f"{socket.gethostname()}-{os.getpid()}"


def sharing_of(
    name: str, namespace: str | None = None, lease_seconds: int = ReplicaSettings.lease_seconds
) -> Sharing:
    """This replica in the group ``name``: known by its pod's name (or host and process), its
    Leases in ``namespace``, else its pod's, else ``default``, lasting ``lease_seconds``."""
    identity = replica_identity()
    # Both a label value and part of its Lease's name: lower-case letters, digits, '-', '.'.
    identity = re.sub(r"[^a-z0-9.-]", "-", identity.lower())[-63:].strip("-.") or "replica"
    where = namespace or os.environ.get("POD_NAMESPACE") or "default"
    return Sharing(name=name, namespace=where, identity=identity, lease_seconds=lease_seconds)


@contextlib.asynccontextmanager
async def beside_kopf(
    runtime: Runtime,
    gateway: GatewayOptions | None,
    peering: Peering | None,
    namespaces: Collection[str],
    lease_paths: Collection[str] = (),
) -> AsyncIterator[None]:
    """The gateway (its certificate kept current), the sweep of leases whose deletion the watch
    missed, the operator's own watch of the leases at ``lease_paths``, and with peers the watch
    on which replica acts, while kopf runs; the lease tasks are stopped when it ends, their
    leases left Bound."""
    opened, tasks = None, list[asyncio.Task[None]]()
    try:
        sweeping = leases.sweep(runtime, runtime.settings.leases.sweep_seconds)
        tasks.append(asyncio.create_task(sweeping))
        tasks += [asyncio.create_task(leasewatch.follow(runtime, path)) for path in lease_paths]
        if gateway is not None:
            opened = await open_gateway(runtime, gateway)
            tasks.append(asyncio.create_task(keep_certificate(runtime, gateway, opened)))
            runtime.drain_gateway = functools.partial(
                opened.server.drain, runtime.settings.gateway.drain_seconds
            )
        if peering is not None:
            follower = standby.follow_peers(
                runtime,
                standby.peering_paths(peering.name, namespaces),
                identity=peering.identity,
                priority=peering.priority,
                every=runtime.settings.gateway.peers_seconds,
            )
            tasks.append(asyncio.create_task(follower))
        if runtime.sharing is not None:
            tasks += sharing_tasks(runtime, runtime.sharing, namespaces)
        yield
    finally:
        await stop_beside(runtime, opened, tasks)


async def stop_beside(
    runtime: Runtime, opened: OpenGateway | None, tasks: list[asyncio.Task[None]]
) -> None:
    """What :func:`beside_kopf` started, stopped as kopf has: the gateway's calls let end,
    the tasks ended, the lease tasks stopped with their leases left Bound."""
    if runtime.sharing is not None and not runtime.placements.left:
        # kopf stopped before its cleanup ran: the leases are parked, and the others take the
        # pools up now, not after a lapse.
        await runtime.leases.stop_all(runtime.settings.leases.stop_seconds)
        await replicas.leave(runtime, runtime.sharing)
    if opened is not None:
        # Done in kopf's cleanup already, unless kopf stopped first; the watches still say where
        # each pool went.
        await opened.server.drain(runtime.settings.gateway.drain_seconds)
    for task in tasks:
        task.cancel()
    # Ended, not only told to: no lease event is handed on after this, so every lease task is
    # one stop_all sees.
    await asyncio.gather(*tasks, return_exceptions=True)
    await runtime.leases.stop_all(runtime.settings.leases.stop_seconds)
    if opened is not None:
        await opened.stop()


def sharing_tasks(
    runtime: Runtime, sharing: Sharing, namespaces: Collection[str]
) -> list[asyncio.Task[None]]:
    """A replica that shares the pools: its Lease renewed, the assigner's work when it holds
    that Lease, and its own watches of every pool, run and lease it may place."""
    paths = replicas.placement_paths(list(namespaces))
    return [
        asyncio.create_task(replicas.keep_membership(runtime, sharing)),
        asyncio.create_task(replicas.assign(runtime, sharing, paths, namespaces)),
        *(
            asyncio.create_task(replicas.watch_placements(runtime, path, namespaces))
            for path in paths
        ),
    ]


#: The gateway of an operator a local cluster runs: on loopback, on any free port.
LOCAL_GATEWAY = GatewayOptions(host="127.0.0.1", port=0)


class HostHandlesSignals(logging.Filter):
    """Drops kopf's warning that it ignores OS signals off the main thread. An embedded operator
    runs in a thread of its host (``agentpool local up``, ``agentpool demo``, the tests), which
    handles SIGINT and SIGTERM itself and stops the operator by its stop flag, so the warning
    says nothing wrong; kopf has no setting to skip it, and gives it on every start."""

    MESSAGE = "OS signals are ignored: running not in the main thread."

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != self.MESSAGE


#: Installed once on the kopf logger that gives the warning; other records pass.
HOST_HANDLES_SIGNALS = HostHandlesSignals()


def embedded_operator(
    state_dir: Path | None = None,
) -> Callable[[Path, asyncio.Event], Awaitable[None]]:
    """The operator as a local cluster runs it: in a thread's own event loop, against the
    kubeconfig the cluster wrote (its current context), until the cluster sets the stop flag.

    ``state_dir`` keeps the runs' journals. Its gateway listens on loopback, on a free port.
    """
    logging.getLogger("kopf._core.reactor.running").addFilter(HOST_HANDLES_SIGNALS)

    async def run(kubeconfig: Path, stop_flag: asyncio.Event) -> None:
        connection = Connection(kubeconfig=str(kubeconfig))
        await run_operator(
            connection,
            stop_flag=stop_flag,
            embedded=True,
            state_dir=state_dir,
            gateway=LOCAL_GATEWAY,
        )

    return run
