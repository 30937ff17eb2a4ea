"""A replica's side of sharing the pools: what it takes for its own, and how it hands a pool over.

What a user of several replicas relies on: a replica works only on what carries its name and is
not being handed over; alone, it works on everything; a pool it hands over is parked before the
new replica is named, and only if nothing changed the pool meanwhile.
"""

from __future__ import annotations

import asyncio
import copy
import time
from dataclasses import replace
from typing import Any, cast

import pytest

from agentpool.handlers import replicas, serving
from agentpool.handlers.runtime import Runtime, Sharing
from agentpool.io.agents import AgentClient
from agentpool.io.kube import Conflict, Kube, ObjectNotFound
from agentpool.pool.placement import HANDOVER_ANNOTATION, REPLICA_LABEL, Assign, HandOver, Placed

ME = Sharing(name="agentpool", namespace="agentpool-system", identity="r-a")


class PoolKube:
    """One pool as stored, with its resourceVersion; metadata patches conditional on it."""

    def __init__(self, labels: dict[str, str], annotations: dict[str, str]) -> None:
        self.meta: dict[str, Any] = {
            "name": "p",
            "namespace": "ns",
            "resourceVersion": "7",
            "labels": labels,
            "annotations": annotations,
        }
        self.patches: list[dict[str, Any]] = []

    async def get_custom(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        return {"metadata": dict(self.meta)}

    async def patch_metadata(
        self,
        plural: str,
        namespace: str,
        name: str,
        metadata: dict[str, Any],
        *,
        resource_version: str | None = None,
    ) -> None:
        if resource_version is not None and resource_version != self.meta["resourceVersion"]:
            raise Conflict("agentpools: Conflict")
        self.patches.append(metadata)


def runtime(kube: Any, sharing: Sharing | None = ME) -> Runtime:
    return Runtime(kube=cast(Kube, kube), agents=cast(AgentClient, None), sharing=sharing)


def meta(owner: str | None = None, handover: str | None = None) -> dict[str, Any]:
    return {
        "labels": {REPLICA_LABEL: owner} if owner else {},
        "annotations": {HANDOVER_ANNOTATION: handover} if handover else {},
    }


def test_a_replica_works_on_what_carries_its_name_and_is_not_being_handed_over() -> None:
    shared = runtime(None)
    assert shared.works_on(meta("r-a"))
    assert not shared.works_on(meta("r-b"))
    assert not shared.works_on(meta())
    assert not shared.works_on(meta("r-a", handover="r-b"))
    alone = runtime(None, sharing=None)
    assert alone.works_on(meta("r-b"))
    assert alone.works_on(meta())


def test_another_replica_s_pool_is_elsewhere_unless_it_is_coming_here() -> None:
    shared = runtime(None)
    shared.placements.pools[("ns", "theirs")] = Placed(owner="r-b")
    shared.placements.pools[("ns", "coming")] = Placed(owner="r-b", handover="r-a")
    shared.placements.pools[("ns", "going")] = Placed(owner="r-a", handover="r-c")
    assert shared.elsewhere(("ns", "theirs"))
    assert not shared.elsewhere(("ns", "coming"))
    assert shared.elsewhere(("ns", "going"))
    assert not shared.elsewhere(("ns", "unseen"))
    assert not runtime(None, sharing=None).elsewhere(("ns", "theirs"))


def test_the_view_shows_a_write_before_its_watch_event_does() -> None:
    shared = runtime(None)
    seen = shared.placements
    seen.see_pool(("ns", "p"), meta("r-a"), deleted=False)
    assert seen.changed.is_set()
    seen.changed.clear()
    seen.see_pool(("ns", "p"), meta("r-a"), deleted=False)
    assert not seen.changed.is_set(), "nothing new: nothing to place"
    seen.wrote(HandOver(("ns", "p"), "r-b"))
    assert seen.pools[("ns", "p")] == Placed(owner="r-a", handover="r-b")
    seen.wrote(Assign(("ns", "p"), "r-b"))
    assert seen.pools[("ns", "p")] == Placed(owner="r-b")
    seen.see_pool(("ns", "p"), meta("r-b"), deleted=True)
    assert ("ns", "p") not in seen.pools


async def test_a_pool_handed_over_is_parked_before_its_new_replica_is_named() -> None:
    kube = PoolKube({REPLICA_LABEL: "r-a"}, {HANDOVER_ANNOTATION: "r-b"})
    order: list[str] = []

    async def park() -> None:
        order.append(f"parked with {len(kube.patches)} patches")

    await replicas.hand_over(runtime(kube), ("ns", "p"), park)
    assert order == ["parked with 0 patches"]
    assert kube.patches == [
        {"labels": {REPLICA_LABEL: "r-b"}, "annotations": {HANDOVER_ANNOTATION: None}}
    ]


async def test_a_pool_not_handed_over_from_here_is_left_alone() -> None:
    for labels, marks in (
        ({REPLICA_LABEL: "r-b"}, {HANDOVER_ANNOTATION: "r-c"}),
        ({REPLICA_LABEL: "r-a"}, {}),
    ):
        kube = PoolKube(labels, marks)
        parked: list[bool] = []

        async def park(parked: list[bool] = parked) -> None:
            parked.append(True)

        await replicas.hand_over(runtime(kube), ("ns", "p"), park)
        assert (parked, kube.patches) == ([], [])


async def test_a_pool_changed_while_it_was_parked_is_not_relabelled() -> None:
    """The assigner pointed the hand-over elsewhere meanwhile: the write is refused, and the
    next try reads the pool again."""
    kube = PoolKube({REPLICA_LABEL: "r-a"}, {HANDOVER_ANNOTATION: "r-b"})

    async def park() -> None:
        kube.meta = {**kube.meta, "resourceVersion": "8"}

    await replicas.hand_over(runtime(kube), ("ns", "p"), park)
    assert kube.patches == []


def test_a_running_run_ties_the_pools_its_routes_name_and_an_ended_one_does_not() -> None:
    """A run follows its poolRef, else its routes' first pool, and while it runs the other pools
    its routes name go with it; once it has ended they are free to go where their own keys put
    them. A lease follows its pool alone."""

    def run(spec: dict[str, Any], phase: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"metadata": {"name": "r", "namespace": "ns"}, "spec": spec}
        if phase is not None:
            body["status"] = {"phase": phase}
        return body

    routes = {"field": "role", "pools": {"coder": "code", "researcher": "research"}}
    routed = replicas.follower_of("poolruns", run({"routes": routes}, "Running"))
    assert routed is not None
    assert (routed.pool, routed.together) == ("code", ("research",))
    both = replicas.follower_of("poolruns", run({"poolRef": {"name": "main"}, "routes": routes}))
    assert both is not None
    assert (both.pool, both.together) == ("main", ("code", "research"))
    for phase in ("Succeeded", "Failed"):
        ended = replicas.follower_of("poolruns", run({"routes": routes}, phase))
        assert ended is not None
        assert (ended.pool, ended.together) == ("code", ())
    lease = replicas.follower_of("agentleases", run({"poolRef": {"name": "p"}}))
    assert lease is not None
    assert (lease.pool, lease.together) == ("p", ())


class SlowPoolKube(PoolKube):
    """Reading the pool takes until ``read`` is set; the replica's Leases can be read and go."""

    def __init__(self) -> None:
        super().__init__({REPLICA_LABEL: "r-a"}, {})
        self.reading = asyncio.Event()
        self.read = asyncio.Event()
        self.deleted: list[str] = []

    async def get_custom(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        self.reading.set()
        await self.read.wait()
        return {"metadata": dict(self.meta), "spec": {"image": "agent:1"}}

    async def read_lease(self, namespace: str, name: str) -> dict[str, Any]:
        return {"spec": {"holderIdentity": "r-a", "leaseDurationSeconds": 5}}

    async def delete_lease(self, namespace: str, name: str) -> None:
        self.deleted.append(name)


async def test_a_call_that_came_in_as_the_replica_left_is_sent_on_at_once() -> None:
    """A gateway call for a pool whose loop here has ended, still reading the pool as the replica
    leaves, is told at once that this replica stops (its relayer sends it where the pool went),
    rather than waiting for a loop that will never start until the stop cuts it."""
    kube = SlowPoolKube()
    here = runtime(kube)
    waiting = asyncio.ensure_future(
        serving.served_pool(here, "ns", "p", timeout=lambda _: 60.0, elsewhere_now=True)
    )
    await kube.reading.wait()
    await replicas.leave(here, ME)
    kube.read.set()
    with pytest.raises(serving.NotServed, match="this replica stops"):
        await asyncio.wait_for(waiting, 5.0)
    assert kube.deleted, "the replica's Lease went"


class GroupKube:
    """The group's membership Leases, as listed, each with a resourceVersion; a replica that
    joins adds one, and a delete may be conditional on the version read."""

    def __init__(self) -> None:
        self.leases: list[dict[str, Any]] = []
        self.listed = asyncio.Event()
        self.version = 0

    def join(self, identity: str, gateway: str, *, seconds: int = 5) -> None:
        other = Sharing(name=ME.name, namespace=ME.namespace, identity=identity)
        body = replicas.lease_body(other, other.member_lease, seconds, time.time(), gateway)
        self.version += 1
        body["metadata"]["resourceVersion"] = str(self.version)
        self.leases.append(body)

    def renew(self, identity: str) -> None:
        for lease in self.leases:
            if lease["spec"]["holderIdentity"] == identity:
                self.version += 1
                lease["metadata"]["resourceVersion"] = str(self.version)

    async def list_leases(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        self.listed.set()
        return [copy.deepcopy(lease) for lease in self.leases]

    async def delete_lease(
        self, namespace: str, name: str, *, resource_version: str | None = None
    ) -> None:
        (lease,) = [lease for lease in self.leases if lease["metadata"]["name"] == name]
        if resource_version not in (None, lease["metadata"]["resourceVersion"]):
            raise Conflict("leases: Conflict")
        self.leases.remove(lease)


async def test_a_replica_that_left_still_learns_where_the_others_gateways_are() -> None:
    """A stopping replica still passes on the calls it holds, for as long as it drains: a
    replica that joins meanwhile (a rolling update's next pod) is reached at the gateway it
    names, not at none."""
    kube = GroupKube()
    kube.join("r-b", "https://10.0.0.2:8443")
    here = runtime(kube)
    here.settings = replace(
        here.settings, replicas=replace(here.settings.replicas, assign_seconds=0.01)
    )
    here.placements.left = True
    assigning = asyncio.ensure_future(replicas.assign(here, ME, []))
    try:
        await asyncio.wait_for(kube.listed.wait(), 5.0)
        kube.join("r-c", "https://10.0.0.3:8443")
        kube.listed.clear()
        # Listed after the join: the gateways are noted in the same step, before it yields.
        await asyncio.wait_for(kube.listed.wait(), 5.0)
        assert here.placements.gateways == {
            "r-b": "https://10.0.0.2:8443",
            "r-c": "https://10.0.0.3:8443",
        }
    finally:
        assigning.cancel()


async def test_the_lease_of_a_replica_killed_is_deleted_unless_it_was_renewed_since() -> None:
    """A killed replica never gives its Lease up. The assigner deletes it once lapsed: a replica
    started later would count it live for a whole duration from its first sight of it, and give
    pools to nobody. One renewed after it was read (the replica was only slow) stays."""
    kube = GroupKube()
    kube.join("r-b", "https://10.0.0.2:8443")
    kube.join("r-gone", "https://10.0.0.9:8443", seconds=0)
    kube.join("r-slow", "https://10.0.0.8:8443", seconds=0)
    here = runtime(kube)
    live, lapsed = await replicas.live_members(here, ME)
    assert live == {"r-b"}
    assert here.placements.gateways == {"r-b": "https://10.0.0.2:8443"}
    kube.renew("r-slow")
    await replicas.forget_lapsed(here, ME, lapsed)
    assert [lease["spec"]["holderIdentity"] for lease in kube.leases] == ["r-b", "r-slow"]


class RenewKube(GroupKube):
    """A group whose Leases can be renewed and created, as the API server keeps them."""

    async def patch_lease(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        if not [lease for lease in self.leases if lease["metadata"]["name"] == name]:
            raise ObjectNotFound(name)

    async def create_lease(self, namespace: str, body: dict[str, Any]) -> None:
        self.leases.append(body)


async def test_a_sharing_replica_is_ready_once_it_has_joined_and_until_it_leaves() -> None:
    """A rolling update stops an old pod once the new one is Ready: the new one must be among
    the replicas by then, or the old one's pools would go to the others only. Once it leaves
    (stopping), it is not Ready: the Service stops sending it calls."""
    kube = RenewKube()
    here = runtime(kube)
    assert not here.ready(), "not yet among the replicas"
    await replicas.renew_membership(here, ME)
    assert [lease["metadata"]["name"] for lease in kube.leases] == [ME.member_lease]
    assert here.ready()
    await replicas.leave(here, ME)
    assert not here.ready()
    alone = runtime(kube, sharing=None)
    assert alone.ready(), "acting alone, it is ready from the start"


class SlowWrites:
    """Every label write takes ``seconds``, as against a loaded API server."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.written: list[tuple[str, str]] = []

    async def patch_metadata(
        self, plural: str, namespace: str, name: str, metadata: dict[str, Any]
    ) -> None:
        await asyncio.sleep(self.seconds)
        self.written.append((namespace, name))


async def test_the_assigner_stops_writing_when_its_time_is_up_to_renew_its_lease() -> None:
    """A thousand pools to place take longer than the assigner's Lease lasts: it stops at its
    deadline and renews before it places the rest, or another replica takes the Lease meanwhile
    and two assigners write at once."""
    kube = SlowWrites(0.01)
    here = runtime(kube)
    for index in range(200):
        here.placements.pools[("ns", f"p{index:03d}")] = Placed()
    await replicas.place_until(here, {"r-a", "r-b"}, time.monotonic() + 0.2)
    assert 0 < len(kube.written) < 200, "stopped at the deadline"
    before = len(kube.written)
    await replicas.place_all(here, {"r-a", "r-b"}, time.monotonic() - 1)
    assert len(kube.written) == before + 1, "a pass begun late still gets on, by one write"
    await replicas.place_all(here, {"r-a", "r-b"}, time.monotonic() + 3600)
    assert sorted(set(kube.written)) == sorted(here.placements.pools), "the rest, next round"
