"""Which replica works on which pool: the assigner's decisions, as pure functions.

What a user of several replicas relies on: every pool has exactly one live replica working on
it, the pools spread evenly, a replica that joins or leaves moves only its share, a pool leaves a
live replica only through a hand-over, and runs and leases follow their pool.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentpool.api.conditions import format_micro_time
from agentpool.pool.placement import (
    Assign,
    Follow,
    Follower,
    HandOver,
    Held,
    Placed,
    Sightings,
    choose,
    in_scope,
    is_pattern,
    lead,
    live_members,
    place,
)

names = st.text("abcdefghij-", min_size=1, max_size=6)
keys = st.tuples(names, names)
replica_sets = st.sets(st.sampled_from(["r1", "r2", "r3", "r4", "r5"]), min_size=1)


Pools = dict[tuple[str, str], Placed]


def settle(pools: Pools, members: set[str]) -> Pools:
    """Apply the assigner's writes, and each live owner's answer to a hand-over, until none is
    left: where the pools end up."""
    for _ in range(5):
        writes = place(pools, members)
        if not writes:
            return pools
        for write in writes:
            if isinstance(write, Assign):
                pools[write.key] = Placed(owner=write.owner)
            elif isinstance(write, HandOver):
                # The live owner stops working on it, then writes the new owner itself.
                pools[write.key] = Placed(owner=write.to)
    raise AssertionError(f"the placement did not settle: {place(pools, members)}")


@given(st.sets(keys, max_size=40), replica_sets)
def test_every_pool_gets_one_live_replica_and_a_settled_placement_writes_nothing(
    pool_keys: set[tuple[str, str]], members: set[str]
) -> None:
    pools = settle({key: Placed() for key in pool_keys}, members)
    assert all(placed.owner in members and placed.handover is None for placed in pools.values())
    assert place(pools, members) == []


@given(st.sets(keys, max_size=40), replica_sets, st.sampled_from(["r1", "r2", "r3", "r4", "r5"]))
def test_a_replica_that_joins_takes_pools_only_by_hand_over_and_only_for_itself(
    pool_keys: set[tuple[str, str]], members: set[str], joining: str
) -> None:
    pools = settle({key: Placed() for key in pool_keys}, members)
    writes = place(pools, members | {joining})
    # Nothing is taken from a live replica at once, and no pool moves between the others.
    assert all(isinstance(write, HandOver) and write.to == joining for write in writes)


@given(st.sets(keys, max_size=40), st.sets(st.sampled_from(["r1", "r2", "r3", "r4"]), min_size=2))
def test_the_pools_of_a_replica_gone_go_at_once_and_no_other_pool_moves(
    pool_keys: set[tuple[str, str]], members: set[str]
) -> None:
    pools = settle({key: Placed() for key in pool_keys}, members)
    gone = sorted(members)[0]
    writes = place(pools, members - {gone})
    moved = {write.key for write in writes}
    assert moved == {key for key, placed in pools.items() if placed.owner == gone}
    assert all(isinstance(write, Assign) and write.owner != gone for write in writes)


def test_pools_spread_evenly_over_the_replicas() -> None:
    pools = [("ns", f"pool-{index}") for index in range(3000)]
    counts = Counter(choose(key, ["a", "b", "c"]) for key in pools)
    assert set(counts) == {"a", "b", "c"}
    assert all(800 < count < 1200 for count in counts.values()), counts


def test_a_hand_over_to_a_replica_gone_since_is_pointed_at_the_live_one() -> None:
    key = ("ns", "p")
    members = {"r1", "r2"}
    wanted = choose(key, members)
    other = ({"r1", "r2"} - {wanted}).pop()
    # Even back to the owner itself: it may have stopped working on it already.
    for owner in ("r1", "r2"):
        assert place({key: Placed(owner=owner, handover="r9")}, members) == [HandOver(key, wanted)]
    # Waiting on a live owner to hand it to the replica it belongs to: nothing more to write.
    assert place({key: Placed(owner=other, handover=wanted)}, members) == []


def test_runs_and_leases_follow_their_pool_and_carry_no_replica_while_it_is_handed_over() -> None:
    members = {"r1", "r2"}
    handed = ("ns", "handed")
    settled = ("ns", "settled")
    owner = choose(settled, members)
    assert owner is not None
    pools = {handed: Placed(owner="r1", handover="r2"), settled: Placed(owner=owner)}
    run = Follower("poolruns", "ns", "run", "settled", owner=None)
    lease = Follower("agentleases", "ns", "lease", "handed", owner="r1")
    writes = place(pools, members, [run, lease])
    assert Follow(run, owner) in writes
    assert Follow(lease, "") in writes
    # The run of a pool that does not exist goes to the replica that would own it, to report.
    orphan = Follower("poolruns", "ns", "orphan", "missing")
    assert Follow(orphan, choose(("ns", "missing"), members) or "") in place(
        pools, members, [orphan]
    )


def test_with_no_replica_live_nothing_is_written() -> None:
    assert place({("ns", "p"): Placed(owner="gone")}, set()) == []


def lease(holder: str, renewed: float, seconds: int = 5) -> Held:
    return Held.of(
        {
            "metadata": {"name": "l"},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": seconds,
                "renewTime": format_micro_time(renewed),
            },
        }
    )


def test_a_lease_is_live_for_its_duration_after_its_last_renewal() -> None:
    assert lease("a", 1000.0).live(1004.9)
    assert not lease("a", 1000.0).live(1005.1)
    assert not lease("", 1000.0).live(1000.5)
    assert live_members([lease("a", 1000.0), lease("b", 990.0)], 1002.0) == {"a"}


def test_the_assigner_lease_is_made_renewed_or_taken_only_once_lapsed() -> None:
    assert lead(None, "me", 1000.0) == "create"
    assert lead(lease("me", 900.0), "me", 1000.0) == "renew"
    assert lead(lease("other", 998.0), "me", 1000.0) == "wait"
    assert lead(lease("other", 990.0), "me", 1000.0) == "take"


@given(skew=st.floats(-3600, 3600), renewals=st.lists(st.floats(0.1, 4.9), max_size=20))
def test_a_lease_renewed_within_its_duration_stays_live_whatever_the_holders_clock(
    skew: float, renewals: list[float]
) -> None:
    """A holder whose clock is off by up to an hour either way, renewing within its Lease's
    duration, never looks gone to this replica; once it stops renewing it does, one duration
    after this replica last saw a renewal, by this replica's clock."""
    sightings = Sightings()
    here = 50.0  # this replica's monotonic clock
    holders_clock = 1_000_000.0 + skew
    seen = sightings.see("m", lease("a", holders_clock), here)
    assert seen.live(here)
    for gap in renewals:
        # Looked at just before the renewal: still live.
        assert sightings.see("m", lease("a", holders_clock), here + gap - 0.01).live(here + gap)
        here, holders_clock = here + gap, holders_clock + gap
        assert sightings.see("m", lease("a", holders_clock), here).live(here)
    assert sightings.see("m", lease("a", holders_clock), here + 4.9).live(here + 4.9)
    assert not sightings.see("m", lease("a", holders_clock), here + 5.1).live(here + 5.1)


def test_a_lease_first_seen_counts_as_renewed_then_and_a_forgotten_one_is_new_again() -> None:
    """However old its renewTime, a Lease first seen is live for one duration: this replica
    cannot tell an old clock from a gone holder until it has watched it that long."""
    sightings = Sightings()
    assert sightings.see("m", lease("a", 10.0), 500.0).live(504.0)
    assert not sightings.see("m", lease("a", 10.0), 505.5).live(505.5)
    # Taken by another holder: a change, so renewed when seen.
    assert sightings.see("m", lease("b", 10.0), 506.0).live(510.0)
    sightings.keep([])
    assert sightings.see("m", lease("b", 10.0), 600.0).live(604.0)


@pytest.mark.parametrize(
    ("namespace", "served"),
    [
        ("t-1", True),
        ("team-a", True),
        ("myapp-test", True),
        ("myapp-pr-123", True),
        ("myapp-pr-456", False),
        ("otherapp-pr-123", False),
        ("kube-system", False),
    ],
)
def test_the_namespaces_served_are_those_kopf_serves(namespace: str, served: bool) -> None:
    """Replicas given ``--namespace`` patterns place the pools of exactly the namespaces whose
    handlers kopf runs: globs, names, exclusions, and what a later glob takes back."""
    scope = ["t-*", "team-a", "myapp-*, !*-pr-*, *pr-123"]
    assert in_scope(namespace, scope) is served


def test_a_leading_exclusion_serves_every_other_namespace_and_none_serves_all() -> None:
    assert in_scope("default", ["!kube-*"])
    assert not in_scope("kube-system", ["!kube-*"])
    assert in_scope("anything", [])


@given(name=st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True))
def test_a_plain_name_serves_itself_alone(name: str) -> None:
    assert in_scope(name, [name])
    assert not in_scope(name + "x", [name])
    assert not is_pattern(name)


pool_names = st.sampled_from([f"p{index}" for index in range(8)])
routed_runs = st.lists(st.lists(pool_names, min_size=1, max_size=3), max_size=4)


@given(routed_runs, replica_sets)
def test_the_pools_a_run_routes_to_go_to_one_replica_and_the_run_with_them(
    routes: list[list[str]], members: set[str]
) -> None:
    """A run whose routes name several pools takes agents from each where it runs: once
    placed, its pools (and those of any run sharing one of them) have one replica, which the
    run follows; pools no run ties together stay where their own key puts them."""
    runs = [
        Follower("poolruns", "ns", f"run{index}", pools[0], together=tuple(pools[1:]))
        for index, pools in enumerate(routes)
    ]
    pools: Pools = {("ns", f"p{index}"): Placed() for index in range(8)}
    for _ in range(5):
        writes = place(pools, members, runs)
        if not writes:
            break
        for write in writes:
            if isinstance(write, Assign):
                pools[write.key] = Placed(owner=write.owner)
            elif isinstance(write, HandOver):
                pools[write.key] = Placed(owner=write.to)
            elif isinstance(write, Follow):
                runs = [
                    Follower(r.kind, r.namespace, r.name, r.pool, write.owner, r.together)
                    if r == write.follower
                    else r
                    for r in runs
                ]
    assert place(pools, members, runs) == []
    tied = {pool for pools_of_run in routes if len(set(pools_of_run)) > 1 for pool in pools_of_run}
    for run, pools_of_run in zip(runs, routes, strict=True):
        assert {pools[("ns", pool)].owner for pool in pools_of_run} == {run.owner}
    for key, placed in pools.items():
        if key[1] not in tied:
            assert placed.owner == choose(key, members)


@given(replica_sets, st.lists(pool_names, min_size=1, max_size=3))
def test_a_run_routing_to_pools_not_made_yet_moves_no_pool_that_exists(
    members: set[str], missing: list[str]
) -> None:
    """A run whose routes name pools that do not exist (yet, or by mistake) is placed with the
    pool that does: starting it hands no pool over, so the pool's other runs and leases go on
    where they are."""
    key = ("ns", "q")
    pools: Pools = {key: Placed(owner=choose(key, members))}
    run = Follower("poolruns", "ns", "routed", "q", together=tuple(missing))
    assert place(pools, members, [run]) == [Follow(run, choose(key, members) or "")]
    missing_first = Follower("poolruns", "ns", "routed", missing[0], together=("q",))
    writes = place(pools, members, [missing_first])
    assert not [write for write in writes if not isinstance(write, Follow)]
