"""Replicas that share the pools: each one's membership, the assigner, and the hand-over.

Every replica holds a ``coordination.k8s.io/v1`` Lease of its own, ``<name>-<identity>`` in
the namespace of the group, labelled ``agentpool.dev/share=<name>``, renewed every
``renew_seconds`` (:func:`keep_membership`); a replica whose Lease lapsed or was deleted is not
live. One replica at a time, the holder of the Lease ``<name>-assigner`` (taken as
kube-controller-manager takes its own: created, renewed, or taken once lapsed, each write
conditional on the version read), is the assigner (:func:`assign`): it watches every pool, run
and lease, reads who is live, and writes each object's ``agentpool.dev/replica`` label as
:func:`agentpool.pool.placement.place` decides. Each replica's kopf watches only what is
labelled with its identity, so a replica works on its own pools, runs and leases only; an
object relabelled away leaves its watch as a DELETED event carrying its old labels, which its
handlers tell from a deletion by reading it back (:func:`moved`; a pool, by the deletion
timestamp its finalizer gives a deleted one).

A pool moved from a live replica is first marked with the replica it goes to: its owner's loop
ends, its runs stop and its leases are parked, and the owner writes the new label itself
(:func:`hand_over`). A replica that stops hands over everything at once by deleting its Lease
once kopf has stopped its loops (:func:`leave`): the assigner then gives its pools out at once,
without waiting for a lapse. :class:`ReplicaPeers` is the gateway's way to the other replicas:
a call for a pool another replica works on goes there (:mod:`agentpool.io.peers`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterable, Awaitable, Callable, Collection, Sequence
from typing import Any
from urllib.parse import urlsplit

from agentpool import GROUP, VERSION
from agentpool.api.conditions import format_micro_time
from agentpool.api.raw import RawBody
from agentpool.api.reasons import GatewayReason
from agentpool.gateway.contracts import Relaying
from agentpool.gateway.errors import GatewayError, from_agent, unavailable
from agentpool.gateway.forwarding import RELAYED_HEADER, relayed_back
from agentpool.handlers.runtime import Runtime, Sharing, placed_of
from agentpool.io.kube import Conflict, ObjectNotFound
from agentpool.io.peers import NO_ANSWER, NOT_SENT, PeerClient
from agentpool.pool import placement
from agentpool.pool.placement import (
    HANDOVER_ANNOTATION,
    REPLICA_LABEL,
    Assign,
    Follow,
    Follower,
    HandOver,
    Held,
)
from agentpool.runs.lifecycle import FINISHED
from agentpool.wire import protocol

log = logging.getLogger(__name__)

#: Lists a group's membership Leases.
SHARE_LABEL = "agentpool.dev/share"
#: On a replica's Lease: where the other replicas reach its gateway.
GATEWAY_ANNOTATION = "agentpool.dev/gateway"
#: What each replica watches of the kinds it works on: what carries its own label.
SHARED_PLURALS = ("agentpools", "poolruns", "agentleases")


def selector(sharing: Sharing) -> str:
    """The label selector of what replica ``sharing`` works on."""
    return f"{REPLICA_LABEL}={sharing.identity}"


def lease_body(
    sharing: Sharing, name: str, seconds: int, now: float, gateway: str = ""
) -> dict[str, Any]:
    stamp = format_micro_time(now)
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": sharing.namespace,
            "labels": {SHARE_LABEL: sharing.name},
            "annotations": {GATEWAY_ANNOTATION: gateway} if gateway else {},
        },
        "spec": {
            "holderIdentity": sharing.identity,
            "leaseDurationSeconds": seconds,
            "acquireTime": stamp,
            "renewTime": stamp,
        },
    }


async def keep_membership(runtime: Runtime, sharing: Sharing) -> None:
    """Hold this replica's membership Lease, renewed every ``renew_seconds``, until cancelled."""
    tunables = runtime.settings.replicas
    while not runtime.placements.left:
        try:
            await renew_membership(runtime, sharing)
        except Exception as error:  # the next renewal tries again; a lapse moves the pools
            log.warning("renewing the replica's Lease failed: %s", error)
        await asyncio.sleep(tunables.renew_seconds)


async def renew_membership(runtime: Runtime, sharing: Sharing) -> None:
    seconds = runtime.settings.replicas.lease_seconds
    gateway = runtime.gateway.own if runtime.gateway is not None else ""
    patch = {
        "metadata": {"annotations": {GATEWAY_ANNOTATION: gateway or None}},
        "spec": {"renewTime": format_micro_time(time.time()), "leaseDurationSeconds": seconds},
    }
    try:
        await runtime.kube.patch_lease(sharing.namespace, sharing.member_lease, patch)
    except ObjectNotFound:
        if runtime.placements.left:
            return  # deleted as it leaves, while this renewal was on its way
        body = lease_body(sharing, sharing.member_lease, seconds, time.time(), gateway)
        await runtime.kube.create_lease(sharing.namespace, body)
    runtime.placements.joined = True


async def live_members(runtime: Runtime, sharing: Sharing) -> tuple[set[str], list[RawBody]]:
    """The replicas of the group whose Lease is live, their gateways noted in
    :attr:`Runtime.placements`; and the member Leases that lapsed."""
    leases = await runtime.kube.list_leases(sharing.namespace, f"{SHARE_LABEL}={sharing.name}")
    members = [lease for lease in leases if lease["metadata"]["name"] != sharing.assigner_lease]
    now, sightings = time.monotonic(), runtime.placements.sightings
    seen = {lease["metadata"]["name"]: seen_now(sightings, lease, now) for lease in members}
    sightings.keep([*seen, sharing.assigner_lease])
    live = placement.live_members(seen.values(), now)
    runtime.placements.gateways = {
        holder: gateway
        for lease in members
        if (holder := Held.of(lease).holder) in live
        and (gateway := (lease["metadata"].get("annotations") or {}).get(GATEWAY_ANNOTATION))
        # This replica's own credentials go with a call passed on: over HTTPS only.
        and str(gateway).startswith("https://")
    }
    lapsed = [lease for lease in members if not seen[lease["metadata"]["name"]].live(now)]
    return live, lapsed


async def forget_lapsed(runtime: Runtime, sharing: Sharing, lapsed: list[RawBody]) -> None:
    """Delete the Leases of replicas gone without giving them up (killed): a replica that
    starts later counts a Lease it has not seen before as renewed then, and would give pools
    to a gone one for a whole duration. Each as read: one renewed since stays."""
    for lease in lapsed:
        meta = lease["metadata"]
        with contextlib.suppress(ObjectNotFound, Conflict):
            await runtime.kube.delete_lease(
                sharing.namespace, meta["name"], resource_version=meta.get("resourceVersion")
            )
            log.info("replica %s is gone: its Lease is deleted", Held.of(lease).holder)


def seen_now(sightings: placement.Sightings, lease: RawBody, now: float) -> Held:
    """``lease`` as this replica's own clock judges it (:class:`placement.Sightings`)."""
    return sightings.see(lease["metadata"]["name"], Held.of(lease), now)


async def take_assigner(runtime: Runtime, sharing: Sharing) -> bool:
    """Whether this replica is the assigner, after one try to make, renew or take its Lease."""
    kube, namespace, name = runtime.kube, sharing.namespace, sharing.assigner_lease
    seconds = runtime.settings.replicas.lease_seconds
    try:
        lease: RawBody | None = await kube.read_lease(namespace, name)
    except ObjectNotFound:
        lease = None
    held = (
        None if lease is None else seen_now(runtime.placements.sightings, lease, time.monotonic())
    )
    step = placement.lead(held, sharing.identity, time.monotonic())
    if runtime.placements.left:
        return False
    now = time.time()
    try:
        if step == "create":
            await kube.create_lease(namespace, lease_body(sharing, name, seconds, now))
        elif step in ("renew", "take") and lease is not None:
            spec = dict(lease.get("spec") or {})
            spec.update(holderIdentity=sharing.identity, leaseDurationSeconds=seconds)
            spec["renewTime"] = format_micro_time(now)
            if step == "take":
                spec["acquireTime"] = spec["renewTime"]
                spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
            await kube.replace_lease(namespace, {**lease, "spec": spec})
    except Conflict:
        return False  # another replica wrote it first
    return step != "wait"


async def assign(
    runtime: Runtime, sharing: Sharing, paths: list[str], namespaces: Collection[str] = ()
) -> None:
    """Be the assigner whenever this replica holds its Lease: write where each pool, run and
    lease of :attr:`Runtime.placements` belongs (:func:`watch_placements` keeps them), until
    cancelled. Who holds the Lease and who is live are read once every ``assign_seconds``;
    what changes in between is placed at once. Before it first places anything, it lists what
    is at ``paths`` itself: its watches may not have, a run or lease of a pool not seen would be
    placed as a pool that does not exist, and pools a run ties together as if it did not.
    A replica that left reads on until cancelled, and writes nothing."""
    every = runtime.settings.replicas.assign_seconds
    listed = False
    while True:
        tick = time.monotonic() + every
        try:
            # Every replica reads who is live: its gateway passes calls on to them, a replica
            # that left too, for the calls it still holds as it drains. It places nothing more.
            members, lapsed = await live_members(runtime, sharing)
            if not runtime.placements.left and await take_assigner(runtime, sharing):
                # Written until half the Lease's time since its renewal: renewed before the
                # others could take it, the rest is written after.
                until = time.monotonic() + runtime.settings.replicas.lease_seconds / 2
                await forget_lapsed(runtime, sharing, lapsed)
                if not listed:
                    await list_placed(runtime, paths, namespaces)
                    listed = True
                await place_until(runtime, members, tick, write_until=until)
        except Exception as error:  # tried again next time
            log.warning("assigning the pools failed: %s", error)
        await asyncio.sleep(max(0.0, tick - time.monotonic()))


async def list_placed(runtime: Runtime, paths: list[str], namespaces: Collection[str]) -> None:
    """Every pool, run and lease at ``paths`` in the served ``namespaces`` into the view, as
    listed now."""
    for path in paths:
        kind = path.rstrip("/").split("/")[-1]
        listed = await runtime.kube.request("GET", path, resource=kind)
        for item in listed.get("items") or ():
            meta = item.get("metadata") or {}
            if placement.in_scope(meta.get("namespace") or "", namespaces):
                note_placed(runtime, kind, item, deleted=False)


async def place_until(
    runtime: Runtime, members: set[str], deadline: float, *, write_until: float | None = None
) -> None:
    """Place everything on ``members`` now, and again on each change seen until ``deadline``;
    a pass writes until ``write_until`` (``deadline`` by default)."""
    changed = runtime.placements.changed
    # A replica that left writes nothing more: another is the assigner now.
    while not runtime.placements.left:
        changed.clear()
        await place_all(runtime, members, deadline if write_until is None else write_until)
        left = deadline - time.monotonic()
        if left <= 0:
            return
        try:
            await asyncio.wait_for(changed.wait(), left)
        except TimeoutError:
            return


async def place_all(runtime: Runtime, members: set[str], deadline: float) -> None:
    """Write every label the live replicas ``members`` call for, as one assigner pass, until
    ``deadline``: the assigner renews its Lease then, before it writes the rest (a thousand
    pools to place take longer than the Lease lasts, and another replica would take it). One
    write at least, however late: a pass always gets on."""
    seen = runtime.placements
    writes = placement.place(seen.pools, members, list(seen.followers.values()))
    for done, write in enumerate(writes):
        if seen.left or (done and time.monotonic() >= deadline):
            return
        try:
            await apply(runtime, write)
            # As its watch event will show it: not written again meanwhile.
            seen.wrote(write)
        except ObjectNotFound:
            seen.forget(write)  # gone since (a watch that listed again does not say so)
        except Conflict:
            seen.changed.set()  # changed since: placed again at once


async def apply(runtime: Runtime, write: placement.Write) -> None:
    if isinstance(write, Assign):
        log.info("pool %s/%s goes to replica %s", *write.key, write.owner)
        meta = {"labels": {REPLICA_LABEL: write.owner}, "annotations": {HANDOVER_ANNOTATION: None}}
        await runtime.kube.patch_metadata("agentpools", *write.key, meta)
    elif isinstance(write, HandOver):
        log.info("pool %s/%s is handed over to replica %s", *write.key, write.to)
        meta = {"annotations": {HANDOVER_ANNOTATION: write.to}}
        await runtime.kube.patch_metadata("agentpools", *write.key, meta)
    elif isinstance(write, Follow):
        follower = write.follower
        meta = {"labels": {REPLICA_LABEL: write.owner}}
        await runtime.kube.patch_metadata(follower.kind, follower.namespace, follower.name, meta)


def follower_of(kind: str, body: RawBody) -> Follower | None:
    """A run or lease as the assigner places it: by the pool it follows (a run, its first),
    with the other pools a run's routes name, placed with it while the run has not ended."""
    meta, spec = body["metadata"], dict(body.get("spec") or {})
    pool = (spec.get("poolRef") or {}).get("name")
    routed: list[str] = []
    if kind == "poolruns":
        routed = [str(name) for name in ((spec.get("routes") or {}).get("pools") or {}).values()]
        # As the run's engine names its pools: its poolRef, else its routes' first.
        pool = pool or (routed[0] if routed else None)
        if (body.get("status") or {}).get("phase") in FINISHED:
            routed = []  # an ended run ties its pools no more
    if not pool:
        return None
    owner, _ = placed_of(meta)
    together = tuple(sorted(set(routed) - {pool}))
    namespace = meta.get("namespace") or ""
    return Follower(kind, namespace, meta["name"], str(pool), owner, together)


async def watch_placements(runtime: Runtime, path: str, namespaces: Collection[str]) -> None:
    """Keep :attr:`Runtime.placements` to the objects at ``path`` (every replica's, labelled or
    not) in the served ``namespaces`` (names or patterns; none: all), until cancelled."""
    kind = path.rstrip("/").split("/")[-1]
    async for event, body in runtime.kube.watch(path):
        meta = body.get("metadata") or {}
        if placement.in_scope(meta.get("namespace") or "", namespaces):
            note_placed(runtime, kind, body, deleted=event == "DELETED")


def note_placed(runtime: Runtime, kind: str, body: RawBody, *, deleted: bool) -> None:
    """One pool, run or lease, as a watch or a listing shows it, into the placements seen."""
    meta = body.get("metadata") or {}
    if kind == "agentpools":
        # A pool being deleted stays with the replica that drains it.
        deleted = deleted or bool(meta.get("deletionTimestamp"))
        key = (meta.get("namespace") or "", meta.get("name") or "")
        runtime.placements.see_pool(key, meta, deleted=deleted)
        return
    follower = follower_of(kind, body)
    if follower is not None:
        runtime.placements.see_follower(follower, deleted=deleted)


def placement_paths(namespaces: list[str]) -> list[str]:
    """Where the replicas' own watches read: each named namespace, or the whole cluster for
    every namespace or patterns (whose namespaces :func:`watch_placements` picks)."""
    base = f"/apis/{GROUP}/{VERSION}"
    if not namespaces or any(placement.is_pattern(namespace) for namespace in namespaces):
        return [f"{base}/{plural}" for plural in SHARED_PLURALS]
    return [
        f"{base}/namespaces/{namespace}/{plural}"
        for namespace in sorted(set(namespaces))
        for plural in SHARED_PLURALS
    ]


async def hand_over(
    runtime: Runtime, key: tuple[str, str], park: Callable[[], Awaitable[None]]
) -> None:
    """Finish handing the pool ``key`` over, when it is being handed over from this replica:
    once ``park`` has parked what of it ran here, write the replica it goes to in its label, if
    nothing changed it since it was read (else the next try reads it again)."""
    if runtime.sharing is None:
        return
    try:
        pool = await runtime.kube.get_custom("agentpools", *key)
    except ObjectNotFound:
        return
    meta = pool["metadata"]
    owner, to = placed_of(meta)
    if owner != runtime.sharing.identity or not to:
        return
    await park()
    labels = {"labels": {REPLICA_LABEL: to}, "annotations": {HANDOVER_ANNOTATION: None}}
    with contextlib.suppress(Conflict, ObjectNotFound):
        version = meta.get("resourceVersion")
        await runtime.kube.patch_metadata("agentpools", *key, labels, resource_version=version)
        log.info("pool %s/%s handed over to replica %s", *key, to)


async def moved(runtime: Runtime, plural: str, body: RawBody) -> bool:
    """Whether an object whose watch said DELETED is still there: it left this replica's watch
    (relabelled to another replica), rather than being deleted. The event cannot tell: it
    carries the object as the watch last matched it."""
    if runtime.sharing is None:
        return False
    meta = body["metadata"]
    try:
        found = await runtime.kube.get_custom(plural, meta.get("namespace") or "", meta["name"])
    except ObjectNotFound:
        return False
    return bool(found["metadata"].get("uid") == meta.get("uid"))


async def leave(runtime: Runtime, sharing: Sharing) -> None:
    """This replica stops: its Lease goes, and the assigner's if it holds it, so the others
    take its pools at once rather than after a lapse. It renews and takes none again."""
    runtime.placements.left = True
    # A call waiting for a pool this replica will not serve now is sent where the pool goes.
    runtime.pools.stop_waiting()
    for name in (sharing.member_lease, sharing.assigner_lease):
        with contextlib.suppress(Exception):
            if name == sharing.assigner_lease:
                held = Held.of(await runtime.kube.read_lease(sharing.namespace, name))
                if held.holder != sharing.identity:
                    continue
            await runtime.kube.delete_lease(sharing.namespace, name)


class ReplicaPeers:
    """The gateway's way to the other replicas: the replica that works on a pool, by its label
    as this replica's watch shows it, reached at the gateway its Lease names."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._client = PeerClient()

    def elsewhere(self, namespace: str, pool: str, *, lease: str | None = None) -> str | None:
        seen = self._runtime.placements
        if lease is not None:
            follower = seen.followers.get(("agentleases", namespace, lease))
            if follower is None:
                return None
            pool = follower.pool
        if not self._runtime.elsewhere((namespace, pool)):
            return None
        placed = seen.pools[namespace, pool]
        # A pool being handed over is waited for where it goes.
        return seen.gateways.get(placed.handover or placed.owner or "", "")

    async def relay(
        self,
        gateway: str,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: bytes | AsyncIterable[bytes] | None,
        answer: Relaying,
    ) -> None:
        runtime, sharing = self._runtime, self._runtime.sharing
        published = runtime.gateway
        assert sharing is not None
        assert published is not None
        marked = [*headers, (RELAYED_HEADER, sharing.identity)]
        try:
            async with self._client.relay(
                gateway,
                method,
                target,
                marked,
                body,
                ca_pem=published.ca_pem,
                server_name=urlsplit(published.url).hostname or "localhost",
                authorization=await runtime.kube.authorization(),
            ) as relayed:
                first = b""
                if relayed.status == 503:
                    first = b"".join([chunk async for chunk in relayed.body])
                    if _not_served(first):
                        raise unavailable(
                            f"the replica at {gateway} does not serve this pool now",
                            retry_after=runtime.settings.gateway.retry_after_seconds,
                        )
                answer.start(relayed.status, relayed_back(relayed.headers))
                if first:
                    await answer.write(first)
                async for chunk in relayed.body:
                    await answer.write(chunk)
                answer.end()
        except (*NO_ANSWER, TimeoutError) as error:
            if answer.started:
                raise ConnectionError(f"the replica at {gateway} broke its answer off") from error
            raise _unanswered(
                gateway, error, runtime.settings.gateway.retry_after_seconds
            ) from None

    async def close(self) -> None:
        await self._client.close()


def _unanswered(gateway: str, error: BaseException, retry_after: float) -> GatewayError:
    """What a call passed on to ``gateway`` that got no answer is answered."""
    if isinstance(error, NOT_SENT):
        # Never reached it (it stopped, or is gone): sent again where the pool is now.
        return unavailable(
            f"the replica that works on this pool ({gateway}) did not answer: {error}",
            retry_after=retry_after,
        )
    # It may have taken the call: not sent twice.
    return from_agent(
        protocol.AGENT_LOST,
        f"the replica that works on this pool ({gateway}) took the call and went without an "
        f"answer: {error}",
    )


def _not_served(body: bytes) -> bool:
    """Whether another replica's 503 says it does not serve the pool (it stops, or the pool is
    not its own now), rather than that the pool has no agent to give."""
    try:
        error = json.loads(body).get("error") or {}
    except (ValueError, AttributeError):
        return False
    return bool(error.get("reason") == GatewayReason.UNAVAILABLE)
