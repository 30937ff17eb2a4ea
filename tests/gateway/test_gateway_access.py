"""Who may call: the cluster's reviews, asked once per token and grant, kept no longer than the
time a revocation may take, and no more of them than the bound."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from agentpool.gateway.access import Access, Remembered
from agentpool.gateway.contracts import Caller, ReviewFailed
from agentpool.gateway.errors import GatewayError

ADA = Caller(username="system:serviceaccount:ns:ada", uid="u-1", groups=("system:serviceaccounts",))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Cluster:
    """A cluster that knows one token and one grant, and counts what it was asked."""

    tokens: dict[str, Caller] = field(default_factory=lambda: {"good": ADA})
    grants: set[tuple[str, str, str, str]] = field(
        default_factory=lambda: {(ADA.username, "create agentpools/call", "ns", "pool")}
    )
    token_reviews: int = 0
    access_reviews: int = 0
    down: bool = False
    hold: asyncio.Event | None = None

    async def authenticate(self, token: str) -> Caller | None:
        self.token_reviews += 1
        if self.hold is not None:
            await self.hold.wait()
        if self.down:
            raise ReviewFailed("the API server did not answer")
        return self.tokens.get(token)

    async def authorize(
        self,
        caller: Caller,
        *,
        verb: str,
        resource: str,
        subresource: str,
        namespace: str,
        pool: str,
    ) -> bool:
        self.access_reviews += 1
        asked = f"{verb} {resource}/{subresource}"
        return (caller.username, asked, namespace, pool) in self.grants


def access(cluster: Cluster, clock: Clock, *, entries: int = 100) -> Access:
    return Access(cluster, ttl=10.0, entries=entries, retry_after=1.0, clock=clock)


async def admit(door: Access, header: str | None, pool: str = "pool") -> Caller:
    return await door.admit(header, verb="create", subresource="call", namespace="ns", pool=pool)


async def test_a_steady_caller_costs_one_review_of_each_kind_per_ttl() -> None:
    """A thousand calls within the ttl ask the cluster once who the caller is and once whether
    they may; past the ttl, once more each."""
    cluster, clock = Cluster(), Clock()
    door = access(cluster, clock)
    for _ in range(1000):
        assert await admit(door, "Bearer good") == ADA
    assert (cluster.token_reviews, cluster.access_reviews) == (1, 1)
    clock.now += 10.0
    await admit(door, "Bearer good")
    assert (cluster.token_reviews, cluster.access_reviews) == (2, 2)


async def test_a_revoked_grant_is_refused_once_its_decision_lapses() -> None:
    """A grant taken away is still honoured until the kept decision is ttl old, never later."""
    cluster, clock = Cluster(), Clock()
    door = access(cluster, clock)
    await admit(door, "Bearer good")
    cluster.grants.clear()
    clock.now += 9.9
    await admit(door, "Bearer good")
    clock.now += 0.1
    with pytest.raises(GatewayError) as refused:
        await admit(door, "Bearer good")
    assert (refused.value.status, refused.value.reason) == (403, "Forbidden")
    assert ADA.username in refused.value.message


@pytest.mark.parametrize(
    ("header", "status", "words"),
    [
        (None, 401, "bearer token"),
        ("", 401, "bearer token"),
        ("Basic YWRhOnB3", 401, "bearer token"),
        ("Bearer ", 401, "bearer token"),
        ("Bearer unknown", 401, "does not authenticate"),
        ("bearer good", None, ""),
    ],
)
async def test_a_token_is_read_as_the_api_server_reads_it(
    header: str | None, status: int | None, words: str
) -> None:
    """The scheme in any case; no token, another scheme or an unknown token is a 401 that
    says how to get one."""
    door = access(Cluster(), Clock())
    if status is None:
        assert await admit(door, header) == ADA
        return
    with pytest.raises(GatewayError) as refused:
        await admit(door, header)
    assert refused.value.status == status
    assert words in refused.value.message


async def test_an_unanswered_review_is_a_503_and_not_kept() -> None:
    """When the cluster cannot be asked the caller gets 503 with Retry-After, and the next
    call asks again rather than taking a kept failure."""
    cluster, clock = Cluster(down=True), Clock()
    door = access(cluster, clock)
    with pytest.raises(GatewayError) as unavailable:
        await admit(door, "Bearer good")
    assert (unavailable.value.status, unavailable.value.retry_after) == (503, 1.0)
    cluster.down = False
    assert await admit(door, "Bearer good") == ADA
    assert cluster.token_reviews == 2


async def test_callers_of_one_token_at_once_share_one_review() -> None:
    """Twenty calls with a new token at the same moment wait for one TokenReview; one of them
    going away does not fail the others."""
    hold = asyncio.Event()
    cluster, clock = Cluster(hold=hold), Clock()
    door = access(cluster, clock)
    calls = [asyncio.create_task(admit(door, "Bearer good")) for _ in range(20)]
    await asyncio.sleep(0)
    calls[0].cancel()
    hold.set()
    results = await asyncio.gather(*calls[1:])
    assert results == [ADA] * 19
    assert cluster.token_reviews == 1


async def test_the_decisions_kept_are_bounded() -> None:
    """A stream of fresh tokens keeps at most ``entries`` answers, the oldest dropped first."""
    cluster, clock = Cluster(), Clock()
    cluster.tokens.update({f"t{n}": ADA for n in range(50)})
    door = access(cluster, clock, entries=8)
    for n in range(50):
        await admit(door, f"Bearer t{n}")
    assert len(door.callers) == 8
    before = cluster.token_reviews
    await admit(door, "Bearer t49")
    await admit(door, "Bearer t0")
    assert cluster.token_reviews == before + 1


async def test_remembered_answers_expire_by_the_clock() -> None:
    """An answer is kept for exactly the ttl."""
    clock = Clock()
    kept: Remembered[str, int] = Remembered(ttl=5.0, entries=4, clock=clock)
    computed = 0

    async def compute() -> int:
        nonlocal computed
        computed += 1
        return computed

    assert await kept.get("k", compute) == 1
    clock.now += 4.999
    assert await kept.get("k", compute) == 1
    clock.now += 0.001
    assert await kept.get("k", compute) == 2
