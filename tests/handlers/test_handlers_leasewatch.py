"""The operator's own watch of the leases hands their events on as kopf did: one lease's in the
order they came and one at a time, different leases' side by side, a failure to handle one
leaving the others; and it is used only where kopf's pause of a standing-by replica is not
needed."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import pytest

from agentpool.api.raw import RawBody
from agentpool.handlers.leasewatch import Lanes, own_paths
from agentpool.handlers.runtime import Runtime

LEASES = "/apis/agentpool.dev/v1alpha1"


def body(name: str, version: int) -> RawBody:
    return cast(RawBody, {"metadata": {"name": name, "resourceVersion": str(version)}})


class Handled(list[Any]):
    """What was handled, in order; :meth:`reach` waits until there are ``count``."""

    def __init__(self) -> None:
        super().__init__()
        self.grew = asyncio.Event()

    def append(self, item: Any) -> None:
        super().append(item)
        self.grew.set()

    async def reach(self, count: int) -> None:
        async with asyncio.timeout(10):
            while len(self) < count:
                self.grew.clear()
                await self.grew.wait()


async def test_one_leases_events_come_in_order_and_others_pass_a_slow_one() -> None:
    """While a's first event is still being handled (its release waiting on its agent, say),
    b's are handled; a's second waits for its first."""
    release = asyncio.Event()
    handled = Handled()

    async def handle(kind: str | None, obj: RawBody) -> None:
        name, version = obj["metadata"]["name"], obj["metadata"]["resourceVersion"]
        if (name, version) == ("a", "1"):
            await release.wait()
        handled.append((kind, name, version))

    lanes = Lanes(handle)
    lanes.put(("ns", "a"), "ADDED", body("a", 1))
    lanes.put(("ns", "a"), "DELETED", body("a", 3))
    lanes.put(("ns", "b"), "ADDED", body("b", 2))
    lanes.put(("ns", "b"), "MODIFIED", body("b", 4))
    await handled.reach(2)
    assert handled == [("ADDED", "b", "2"), ("MODIFIED", "b", "4")]
    release.set()
    await handled.reach(4)
    assert handled[2:] == [("ADDED", "a", "1"), ("DELETED", "a", "3")]
    await lanes.close()
    assert lanes.waiting == {}


async def test_a_failed_event_leaves_the_next_ones_handled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    handled = Handled()

    async def handle(kind: str | None, obj: RawBody) -> None:
        if kind == "ADDED":
            raise RuntimeError("the API server refused it")
        handled.append(str(kind))

    lanes = Lanes(handle)
    lanes.put(("ns", "a"), "ADDED", body("a", 1))
    lanes.put(("ns", "a"), "MODIFIED", body("a", 2))
    await handled.reach(1)
    assert handled == ["MODIFIED"]
    assert "lease ns/a: handling its ADDED event failed" in caplog.text
    await lanes.close()


async def test_closing_cancels_the_events_still_being_handled() -> None:
    started = asyncio.Event()

    async def handle(kind: str | None, obj: RawBody) -> None:
        started.set()
        await asyncio.Event().wait()

    lanes = Lanes(handle)
    lanes.put(("ns", "a"), "ADDED", body("a", 1))
    await asyncio.wait_for(started.wait(), 10)
    lanes.put(("ns", "b"), "ADDED", body("b", 2))  # cancelled before its lane even begins
    await asyncio.wait_for(lanes.close(), 10)
    assert lanes.waiting == {}
    assert lanes.tasks == set()


def runtime(*, session: bool) -> Runtime:
    return cast(Runtime, SimpleNamespace(kube=SimpleNamespace(watches=session)))


@pytest.mark.parametrize(
    ("namespaces", "paths"),
    [
        ((), [f"{LEASES}/agentleases"]),
        (
            ("team-b", "team-a", "team-b"),  # each once, however often it is named
            [f"{LEASES}/namespaces/team-a/agentleases", f"{LEASES}/namespaces/team-b/agentleases"],
        ),
    ],
)
def test_an_operator_acting_alone_watches_each_served_namespaces_leases(
    namespaces: tuple[str, ...], paths: list[str]
) -> None:
    assert own_paths(runtime(session=True), peering=False, namespaces=namespaces) == paths


@pytest.mark.parametrize(
    ("session", "peering", "namespaces"),
    [
        (True, True, ()),  # kopf pauses a standing-by replica's watches, leases' included
        (True, False, ("team-*",)),  # kopf finds the namespaces a pattern names
        (True, False, ("!team-b",)),  # and those it leaves out
        (True, False, ("team-a,team-b",)),  # a comma is kopf's list of patterns
        (False, False, ()),  # through a proxy: no session to watch over
    ],
)
def test_otherwise_kopf_watches_the_leases(
    session: bool, peering: bool, namespaces: tuple[str, ...]
) -> None:
    assert own_paths(runtime(session=session), peering=peering, namespaces=namespaces) == []


def test_the_registry_binds_the_lease_handler_only_for_kopf_to_watch() -> None:
    from agentpool.handlers import operator
    from agentpool.io.connection import Connection

    def ids(**kwargs: Any) -> set[str]:
        registry = operator.build_registry(
            Runtime(kube=None, agents=None),  # type: ignore[arg-type]
            Connection(),
            **kwargs,
        )
        found = set()
        for part in vars(registry).values():
            if hasattr(part, "get_all_handlers"):
                found |= {str(handler.id) for handler in part.get_all_handlers()}
        return found

    assert "lease_event" in ids()
    assert ids(kopf_leases=False) == ids() - {"lease_event"}


class FakeKube:
    """A watch that gives the events it is handed, and the requests made, noted."""

    watches = True

    def __init__(self, events: list[tuple[str | None, RawBody]]) -> None:
        self.events = events
        self.requests: list[tuple[str, str, Any, str]] = []
        self.refuse: Exception | None = None

    async def watch(self, path: str) -> Any:
        for event in self.events:
            yield event
        await asyncio.Event().wait()

    async def request(self, method: str, path: str, **kwargs: Any) -> None:
        self.requests.append((method, path, kwargs["body"], kwargs["content_type"]))
        if self.refuse is not None:
            raise self.refuse


def lease_body(name: str, *finalizers: str) -> RawBody:
    meta = {"name": name, "namespace": "ns", "finalizers": list(finalizers)}
    return cast(RawBody, {"metadata": meta})


async def test_each_event_reaches_the_lease_handler_and_an_old_finalizer_comes_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Listed leases and changes reach ``lease_event`` as kopf gave them; a lease an older
    operator put its finalizer on has just that one taken off, by a patch that tests it first,
    so its deletion is not held for good."""
    from agentpool.handlers import leases, leasewatch

    seen = Handled()

    async def lease_event(_: Runtime, /, **event: Any) -> None:
        seen.append((event["type"], event["namespace"], event["name"]))

    monkeypatch.setattr(leases, "lease_event", lease_event)
    old = leasewatch.OLD_FINALIZER
    kube = FakeKube([(None, lease_body("a", "other/keep", old)), ("ADDED", lease_body("b"))])
    follower = asyncio.create_task(
        leasewatch.follow(cast(Runtime, SimpleNamespace(kube=kube)), "/leases")
    )
    try:
        await seen.reach(2)
    finally:
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)
    assert set(seen) == {("ADDED", "ns", "b"), (None, "ns", "a")}
    assert kube.requests == [
        (
            "PATCH",
            "/apis/agentpool.dev/v1alpha1/namespaces/ns/agentleases/a",
            [
                {"op": "test", "path": "/metadata/finalizers/1", "value": old},
                {"op": "remove", "path": "/metadata/finalizers/1"},
            ],
            "application/json-patch+json",
        )
    ]


async def test_a_refused_finalizer_patch_is_not_raised() -> None:
    """The list changed since the event (the test refused), the server is away or the lease
    is gone: the patch's failure stays here, so the event still reaches the lease handler and
    the lease's next event tries again."""
    from agentpool.handlers import leasewatch
    from agentpool.io.kube import ObjectNotFound

    for refusal in (RuntimeError("the test failed"), ObjectNotFound("agentleases: gone")):
        kube = FakeKube([])
        kube.refuse = refusal
        runtime_ = cast(Runtime, SimpleNamespace(kube=kube))
        await leasewatch.drop_old_finalizer(runtime_, lease_body("a", leasewatch.OLD_FINALIZER))
        assert len(kube.requests) == 1
