"""Which replica works on which pool, when replicas share the pools: the assigner's decisions.

Each pool is worked on by one live replica at a time, named in its ``agentpool.dev/replica``
label. The replica for a pool is chosen by rendezvous hashing over the live replicas: each pool
goes to the replica whose hash with the pool's key is highest, so a replica that joins takes about
one pool in ``n`` from the others and a replica that leaves gives its pools out evenly, with no
other pool moving (Thaler and Ravishankar's highest random weight).

A pool moves in one of two ways:

- **from a replica no longer live** (its membership Lease lapsed or was deleted): its label is
  rewritten to the new owner at once; nobody else works on it meanwhile;
- **from a live replica** (another joined): in two phases, so no two replicas ever work on it at
  once. The assigner marks the pool ``agentpool.dev/handover`` with the new owner; the old owner
  stops its loop, parks its leases and runs, and rewrites the label itself; until then neither
  works on it. An old owner that dies mid-way lapses, and the first rule takes the pool.

Runs and leases follow their pool: each carries the label of its pool's owner, none while the
pool is handed over. :func:`place` decides every write, from what the assigner read; the
handlers in :mod:`agentpool.handlers.replicas` read and write.
"""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from agentpool.api.raw import RawBody
from agentpool.pool.pods import epoch

#: Who works on the object: a replica's identity (its Lease's holder).
REPLICA_LABEL = "agentpool.dev/replica"
#: On a pool handed over between live replicas: the replica it goes to.
HANDOVER_ANNOTATION = "agentpool.dev/handover"

PoolKey = tuple[str, str]


@dataclass(frozen=True)
class Placed:
    """Where a pool stands: its owner's label and the handover it is in, if any."""

    owner: str | None = None
    handover: str | None = None


@dataclass(frozen=True)
class Follower:
    """A run or lease: the pool it follows and the replica label it carries."""

    kind: str
    namespace: str
    name: str
    pool: str
    owner: str | None = None
    #: The other pools a run's routes send items to: they are placed with ``pool``, as the run
    #: takes agents from each of them where it runs.
    together: tuple[str, ...] = ()


@dataclass(frozen=True)
class Assign:
    """Rewrite the pool's owner (its old owner is gone), clearing any handover."""

    key: PoolKey
    owner: str


@dataclass(frozen=True)
class HandOver:
    """Ask the pool's live owner to give it to ``to``."""

    key: PoolKey
    to: str


@dataclass(frozen=True)
class Follow:
    """Relabel a run or lease to ``owner`` ('' while its pool is handed over)."""

    follower: Follower
    owner: str


Write = Assign | HandOver | Follow


@dataclass(frozen=True)
class Held:
    """A ``coordination.k8s.io`` Lease as a replica reads it: who holds it, until when."""

    holder: str
    renewed: float
    seconds: float

    @classmethod
    def of(cls, lease: RawBody) -> Held:
        spec: dict[str, Any] = dict(lease.get("spec") or {})
        renewed = epoch(spec.get("renewTime")) or epoch(spec.get("acquireTime")) or 0.0
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            renewed=renewed,
            seconds=float(spec.get("leaseDurationSeconds") or 0),
        )

    def live(self, now: float) -> bool:
        """Held and renewed within its duration (as kube-controller-manager's leader election
        and the node heartbeats judge a Lease)."""
        return bool(self.holder) and now < self.renewed + self.seconds


class Sightings:
    """Each Lease as this replica last saw it renewed, timed by this replica's own clock.

    A Lease's ``renewTime`` is written by its holder's clock. Compared with another replica's,
    clocks a few seconds apart would make a live replica look gone (and its pools move while it
    works on them) or a gone one look live. So, as client-go's leader election does, a Lease
    counts as renewed when this replica sees its record change, and lapses its duration after
    that, by this replica's monotonic clock. A Lease seen for the first time counts as renewed
    then: a replica just started waits one duration before it takes a gone one's pools.
    """

    def __init__(self) -> None:
        self._seen: dict[str, tuple[tuple[str, float], float]] = {}

    def see(self, name: str, held: Held, now: float) -> Held:
        """``held`` with its renewal moved to when this replica saw it (``now`` when it
        changed since the last look)."""
        record = (held.holder, held.renewed)
        last = self._seen.get(name)
        if last is None or last[0] != record:
            last = self._seen[name] = (record, now)
        return replace(held, renewed=last[1])

    def keep(self, names: Collection[str]) -> None:
        """Forget the Leases not among ``names`` (deleted): seen again, they are new."""
        for name in self._seen.keys() - set(names):
            del self._seen[name]


def live_members(leases: Iterable[Held], now: float) -> set[str]:
    """The replicas whose membership Lease is live."""
    return {held.holder for held in leases if held.live(now)}


Step = Literal["create", "renew", "take", "wait"]


def lead(held: Held | None, me: str, now: float) -> Step:
    """What replica ``me`` does about the assigner's Lease: make it when there is none, renew it
    when it holds it, take it when it lapsed (or was given up), else wait for it to."""
    if held is None:
        return "create"
    if held.holder == me:
        return "renew"
    return "wait" if held.live(now) else "take"


def choose(key: PoolKey, members: Iterable[str]) -> str | None:
    """The live replica a pool belongs to: the highest rendezvous weight; None with none live."""
    namespace, name = key
    weighed = (
        (hashlib.blake2b(f"{member}\0{namespace}\0{name}".encode(), digest_size=8).digest(), member)
        for member in members
    )
    best = max(weighed, default=None)
    return None if best is None else best[1]


def place(
    pools: Mapping[PoolKey, Placed],
    members: Collection[str],
    followers: Iterable[Follower] = (),
) -> list[Write]:
    """Every write that brings the pools, runs and leases to the live ``members``: pools first,
    then the runs and leases. Nothing with no member live (nobody could take the work)."""
    if not members:
        return []
    followers = list(followers)
    anchors = anchors_of(followers, pools)
    writes: list[Write] = []
    settled: dict[PoolKey, str] = {}
    for key, placed in sorted(pools.items()):
        wanted = choose(anchors.get(key, key), members)
        assert wanted is not None
        if placed.owner not in members:
            writes.append(Assign(key, wanted))
            settled[key] = wanted
        elif placed.handover is not None:
            # Waiting on the live owner; a handover to a replica gone since is pointed anew.
            if placed.handover != wanted:
                writes.append(HandOver(key, wanted))
        elif placed.owner != wanted:
            writes.append(HandOver(key, wanted))
        else:
            settled[key] = placed.owner
    for follower in followers:
        key = (follower.namespace, follower.pool)
        # A run or lease of a pool that does not exist is its would-be owner's to report.
        owner = settled.get(key, "") if key in pools else choose(anchors.get(key, key), members)
        assert owner is not None
        if follower.owner != owner:
            writes.append(Follow(follower, owner))
    return writes


def anchors_of(
    followers: Iterable[Follower], existing: Collection[PoolKey] = ()
) -> dict[PoolKey, PoolKey]:
    """The pools that runs' routes tie together, each with the pool its group is placed by: the
    least key among the group's ``existing`` pools (the least key of all when none exists), so
    the pools one run uses, and through them any other run's, go to one replica, and a route to
    a pool not made yet moves none that is. A pool no route ties is placed by its own key, and
    is absent here."""
    parent: dict[PoolKey, PoolKey] = {}

    def rank(key: PoolKey) -> tuple[bool, PoolKey]:
        return key not in existing, key

    def root(key: PoolKey) -> PoolKey:
        while parent.setdefault(key, key) != key:
            parent[key] = parent[parent[key]]  # halve the path as it is walked
            key = parent[key]
        return key

    for follower in followers:
        for other in follower.together:
            tied = sorted(
                {root((follower.namespace, follower.pool)), root((follower.namespace, other))},
                key=rank,
            )
            for key in tied[1:]:
                parent[key] = tied[0]
    return {key: root(key) for key in list(parent)}


def is_pattern(namespace: str) -> bool:
    """Whether ``--namespace`` was given a pattern rather than a name (kopf's syntax)."""
    return any(mark in namespace for mark in "*?[!,")


def in_scope(namespace: str, patterns: Collection[str]) -> bool:
    """Whether the operator serves ``namespace``, given ``--namespace`` as kopf reads it: none
    means every namespace; each is a name or comma-separated globs: the first includes, a ``!``
    one excludes, a later one takes back what the first included and a ``!`` one excluded (a
    leading ``!`` implies a ``*`` before it). A namespace any of them takes is served: the
    replicas' own watches must see what kopf's handlers see."""
    return not patterns or any(_matches(namespace, pattern) for pattern in patterns)


def _matches(namespace: str, pattern: str) -> bool:
    globs = [glob.strip() for glob in pattern.split(",")]
    if globs[0].startswith("!"):
        globs.insert(0, "*")
    included = fnmatch.fnmatch(namespace, globs[0])
    matched = included
    for glob in globs[1:]:
        if glob.startswith("!"):
            matched = matched and not fnmatch.fnmatch(namespace, glob.lstrip("!"))
        else:
            # Only what the first glob included is taken back.
            matched = matched or (included and fnmatch.fnmatch(namespace, glob))
    return matched
