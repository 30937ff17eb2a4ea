"""The operator's own watch (:meth:`Kube.watch`) gives what kopf's gave the leases: every object
listed, then every change, with none lost or repeated when the watch ends, breaks, fails or the
server no longer has the version watched from. Checked against a loopback server scripted as an
API server's list and watch of one namespace's leases."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import kubernetes
import pytest
from aiohttp import web

from agentpool.io import kube as kube_module
from agentpool.io.kube import Kube, WatchEvent
from loopback import served

LEASES = "/apis/agentpool.dev/v1alpha1/namespaces/ns/agentleases"
#: In a scripted stream: the connection breaks there.
CUT = b"<cut>"
TOKEN = "operator-token-7f3a"


def lease(name: str, version: int, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": str(version)}, **extra}


def line(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


@dataclass
class ScriptedServer:
    """Answers each list with the next scripted listing (or an error status) and each watch
    with the next scripted stream of lines; notes the version each watch asked from, and the
    credentials of every request."""

    listings: list[tuple[int, list[dict[str, Any]]] | int]
    streams: list[list[bytes] | int]
    watched_from: list[str] = field(default_factory=list)
    credentials: set[str] = field(default_factory=set)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    async def leases(self, request: web.Request) -> web.StreamResponse:
        self.credentials.add(request.headers.get("Authorization", ""))
        if request.query.get("watch") in ("true", "1"):
            self.watched_from.append(request.query["resourceVersion"])
            assert request.query["allowWatchBookmarks"] == "true"
            stream = self.streams.pop(0) if self.streams else []
            if isinstance(stream, int):  # the watch request refused outright
                return web.json_response({"kind": "Status", "code": stream}, status=stream)
            response = web.StreamResponse()
            await response.prepare(request)
            for chunk in stream:
                if chunk == CUT:
                    assert request.transport is not None
                    request.transport.abort()  # the connection breaks mid-stream
                    return response
                await response.write(chunk)
            if not self.streams:
                await self.done.wait()  # the last stream stays open, as a watch does
            await response.write_eof()
            return response
        listing = self.listings.pop(0)
        if isinstance(listing, int):
            return web.json_response({"kind": "Status", "code": listing}, status=listing)
        version, items = listing
        return web.json_response({"metadata": {"resourceVersion": str(version)}, "items": items})


@pytest.fixture
def retries(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The watch's failures in a row at each of its waits, each wait made a millisecond."""
    counted: list[int] = []

    def delay(attempt: int, *, base: float, cap: float) -> float:
        counted.append(attempt)
        return 0.001

    monkeypatch.setattr(kube_module, "retry_delay", delay)
    return counted


@pytest.fixture
async def watching() -> AsyncIterator[Any]:
    """A function that serves a scripted server and gives the first ``count`` events of the
    operator's watch of it."""
    kubes: list[Kube] = []

    async def events(server: ScriptedServer, count: int) -> list[WatchEvent]:
        app = web.Application()
        app.router.add_get(LEASES, server.leases)
        async with served(app) as port:
            configuration = kubernetes.client.Configuration()
            configuration.host = f"http://127.0.0.1:{port}"
            configuration.api_key = {"authorization": f"Bearer {TOKEN}"}
            kube = Kube(kubernetes.client.ApiClient(configuration))
            kubes.append(kube)
            await kube.open_session()
            seen: list[WatchEvent] = []
            stream = kube.watch(LEASES)
            async with asyncio.timeout(30):
                async for event in stream:
                    seen.append(event)
                    if len(seen) == count:
                        break
            await stream.aclose()
            server.done.set()
            return seen

    yield events
    for kube in kubes:
        await kube.aclose()


def names(events: list[WatchEvent]) -> list[tuple[str | None, str]]:
    return [(kind, body["metadata"]["name"]) for kind, body in events]


async def test_the_listed_leases_come_first_then_each_change_from_the_listings_version(
    watching: Any,
) -> None:
    """Listed leases come with no type; a bookmark moves the version without an event; a
    watch that ends is opened again from the last version seen, so nothing is given twice."""
    server = ScriptedServer(
        listings=[(10, [lease("a", 7), lease("b", 9)])],
        streams=[
            [line("ADDED", lease("c", 11)), line("BOOKMARK", lease("", 12))],
            [line("MODIFIED", lease("c", 13)), line("DELETED", lease("a", 14))],
        ],
    )
    events = await watching(server, 5)
    assert names(events) == [
        (None, "a"),
        (None, "b"),
        ("ADDED", "c"),
        ("MODIFIED", "c"),
        ("DELETED", "a"),
    ]
    assert server.watched_from == ["10", "12"]
    assert server.credentials == {f"Bearer {TOKEN}"}


async def test_a_version_the_server_no_longer_has_lists_the_leases_again(watching: Any) -> None:
    """The watch's 410 Gone (an ERROR event) lists again and watches from the new listing."""
    gone = {"kind": "Status", "code": 410, "reason": "Expired"}
    server = ScriptedServer(
        listings=[(10, [lease("a", 7)]), (30, [lease("b", 25)])],
        streams=[[line("ERROR", gone)], [line("ADDED", lease("c", 31))]],
    )
    events = await watching(server, 3)
    assert names(events) == [(None, "a"), (None, "b"), ("ADDED", "c")]
    assert server.watched_from == ["10", "30"]


async def test_a_failed_listing_is_tried_again(watching: Any, retries: list[int]) -> None:
    """An API server that answers 500, or does not know the kind yet (404: its CRD not
    installed), is asked again, backing off, until it lists."""
    server = ScriptedServer(
        listings=[500, 404, (5, [lease("a", 4)])],
        streams=[[line("ADDED", lease("b", 6))]],
    )
    events = await watching(server, 2)
    assert names(events) == [(None, "a"), ("ADDED", "b")]
    assert retries == [1, 2]


async def test_a_line_longer_than_aiohttps_own_reader_takes_comes_whole(watching: Any) -> None:
    """A lease with its 64 KiB context is one line of more than 64 KiB; it comes whole, split
    across writes as the server may send it."""
    context = "x" * 70_000
    big = line("MODIFIED", lease("a", 11, spec={"context": context}))
    server = ScriptedServer(
        listings=[(10, [])],
        streams=[[big[:1000], big[1000:50_000], big[50_000:] + line("DELETED", lease("a", 12))]],
    )
    events = await watching(server, 2)
    assert names(events) == [("MODIFIED", "a"), ("DELETED", "a")]
    assert events[0][1]["spec"]["context"] == context


async def test_a_connection_broken_mid_line_goes_on_from_the_last_whole_event(
    watching: Any, retries: list[int]
) -> None:
    """The half line a broken connection leaves is dropped; the watch goes on from the last
    whole event's version, and the next event sets the failures back to none."""
    server = ScriptedServer(
        listings=[(10, [])],
        streams=[
            [line("ADDED", lease("a", 11)), line("ADDED", lease("b", 12))[:20], CUT],
            [line("ADDED", lease("b", 12)), line("ADDED", lease("c", 13)), CUT],
            [line("ADDED", lease("d", 14))],
        ],
    )
    events = await watching(server, 4)
    assert names(events) == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c"), ("ADDED", "d")]
    assert server.watched_from == ["10", "11", "13"]
    assert retries == [1, 1]


async def test_gone_again_and_again_backs_off_more_each_time(
    watching: Any, retries: list[int]
) -> None:
    """A server that answers every watch with 410 Gone, as an ERROR event or outright, is
    listed again each time but waited for longer and longer, not hammered."""
    gone = {"kind": "Status", "code": 410, "reason": "Expired"}
    server = ScriptedServer(
        listings=[(10, []), (11, []), (12, []), (13, [lease("a", 13)])],
        streams=[[line("ERROR", gone)], 410, [line("ERROR", gone)], []],
    )
    events = await watching(server, 1)
    assert names(events) == [(None, "a")]
    assert server.watched_from == ["10", "11", "12"]
    assert retries == [1, 2, 3]


async def test_a_broken_watch_goes_on_from_its_last_version(
    watching: Any, retries: list[int]
) -> None:
    """A stream cut mid-line (the connection broke) loses nothing: the half line is dropped and
    the watch goes on from the last whole event's version."""
    server = ScriptedServer(
        listings=[(10, [])],
        streams=[
            [line("ADDED", lease("a", 11)), line("ADDED", lease("b", 12))[:20]],
            [line("ADDED", lease("b", 12))],
        ],
    )
    events = await watching(server, 2)
    assert names(events) == [("ADDED", "a"), ("ADDED", "b")]
    assert server.watched_from == ["10", "11"]


async def test_an_error_the_watch_gives_is_tried_again_from_the_same_version(
    watching: Any, retries: list[int]
) -> None:
    """An ERROR event other than 410 (the server failed) backs off and watches again from the
    version it had, without listing again; so does a watch that ends at once, giving nothing."""
    failed = {"kind": "Status", "code": 500, "message": "etcd is away"}
    server = ScriptedServer(
        listings=[(10, [])],
        streams=[[line("ERROR", failed)], [], [line("ADDED", lease("a", 11))]],
    )
    events = await watching(server, 1)
    assert names(events) == [("ADDED", "a")]
    assert server.watched_from == ["10", "10", "10"]
    assert retries == [1, 2]
