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
            ("team-b", "team-a"),
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
