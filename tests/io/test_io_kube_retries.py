"""Status writes ride out 409s and 5xx: the Kube wrapper retries them instead of raising.

A single conflict or server error on a status write used to raise out of the pool or run daemon,
which kopf restarts only after its back-off; under 50% injected errors a pool took 50 s to turn
Ready. These tests inject the errors at a loopback HTTP server standing in for the API server and
prove each write lands, promptly, with a re-read after a conflict, while errors that retrying
cannot fix still raise at once. Each runs twice: over the client's worker threads (the CLI's
way) and over the operator's session on the event loop (:meth:`Kube.open_session`).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import kubernetes
import pytest
from aiohttp import web
from kubernetes.client.exceptions import ApiException

from agentpool.io.kube import Kube, ObjectNotFound
from loopback import served

POOL = "/apis/agentpool.dev/v1alpha1/namespaces/ns/agentpools/p"
TOKEN = "operator-token-41c9"


@dataclass
class ScriptedServer:
    """Answers a pool's status patches with the scripted error statuses, then 200; counts the
    pool's reads and keeps each patch that landed, with its content type and credentials."""

    faults: Iterator[int | None] = field(default_factory=lambda: iter(()))
    landed: list[dict[str, Any]] = field(default_factory=list)
    content_types: set[str] = field(default_factory=set)
    credentials: set[str] = field(default_factory=set)
    reads: int = 0

    async def patch(self, request: web.Request) -> web.Response:
        self.credentials.add(request.headers.get("Authorization", ""))
        fault = next(self.faults, None)
        if fault is not None:
            status = {"kind": "Status", "code": fault, "message": f"injected {fault}"}
            return web.json_response(status, status=fault)
        self.content_types.add(request.content_type)
        self.landed.append(await request.json())
        return web.json_response({"metadata": {"name": "p"}})

    async def get(self, request: web.Request) -> web.Response:
        self.reads += 1
        return web.json_response({"metadata": {"name": "p"}})


@pytest.fixture
async def server() -> AsyncIterator[tuple[ScriptedServer, str]]:
    scripted = ScriptedServer()
    app = web.Application()
    app.router.add_patch(f"{POOL}/status", scripted.patch)
    app.router.add_get(POOL, scripted.get)
    async with served(app) as port:
        yield scripted, f"http://127.0.0.1:{port}"


@pytest.fixture(params=["threads", "session"])
async def kube(
    request: pytest.FixtureRequest, server: tuple[ScriptedServer, str]
) -> AsyncIterator[Kube]:
    configuration = kubernetes.client.Configuration()
    configuration.host = server[1]
    configuration.api_key = {"authorization": f"Bearer {TOKEN}"}
    client = Kube(kubernetes.client.ApiClient(configuration))
    if request.param == "session":
        await client.open_session()
    try:
        yield client
    finally:
        await client.aclose()


async def test_status_writes_land_under_half_injected_409_and_5xx(
    kube: Kube, server: tuple[ScriptedServer, str]
) -> None:
    """Every other attempt fails (409, 500, 503, 429 in turn): all 20 writes still land, in order,
    without raising, in well under a second each, and each 409 re-reads the object first. Each
    is a merge patch, sent with the operator's credentials."""
    scripted, _ = server
    pattern = [409, None, 500, None, 503, None, 429, None]
    scripted.faults = iter(pattern * 5)
    started = time.monotonic()
    for n in range(20):
        await kube.patch_status("agentpools", "ns", "p", {"replicas": n})
    assert scripted.landed == [{"status": {"replicas": n}} for n in range(20)]
    assert scripted.reads == 5
    assert scripted.content_types == {"application/merge-patch+json"}
    assert scripted.credentials == {f"Bearer {TOKEN}"}
    assert time.monotonic() - started < 10
    assert kube.writes["patch", "agentpools/status"] == 40


@pytest.mark.parametrize(("status", "error"), [(404, ObjectNotFound), (422, ApiException)])
async def test_errors_retrying_cannot_fix_raise_at_once(
    kube: Kube, server: tuple[ScriptedServer, str], status: int, error: type[Exception]
) -> None:
    """A missing object or an invalid status is not retried: the caller hears of it at once,
    an invalid one in the API server's own words."""
    scripted, _ = server
    scripted.faults = iter([status, None])
    with pytest.raises(error) as raised:
        await kube.patch_status("agentpools", "ns", "p", {"replicas": 1})
    assert scripted.landed == []
    if isinstance(raised.value, ApiException):
        assert json.loads(raised.value.body)["message"] == f"injected {status}"


async def test_the_sessions_credentials_follow_the_clients_refreshes(
    server: tuple[ScriptedServer, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token the client's refresh hook renews (an exec plugin's, a service account's rotated
    file) reaches the session's calls within a second, and the hook, which re-applies the whole
    kubeconfig, runs at most once a second rather than before every call."""
    scripted, url = server
    configuration = kubernetes.client.Configuration()
    configuration.host = url
    refreshes: list[int] = []

    def refresh(config: Any) -> None:
        refreshes.append(len(refreshes))
        config.api_key = {"authorization": f"Bearer token-{len(refreshes)}"}

    configuration.api_key = {"authorization": "Bearer token-0"}
    configuration.refresh_api_key_hook = refresh
    now = [1000.0]
    monkeypatch.setattr("agentpool.io.kube.time.monotonic", lambda: now[0])
    kube = Kube(kubernetes.client.ApiClient(configuration))
    await kube.open_session()
    try:
        for _ in range(3):
            await kube.patch_status("agentpools", "ns", "p", {"replicas": 1})
        assert (scripted.credentials, len(refreshes)) == ({"Bearer token-1"}, 1)
        now[0] += 1.0
        await kube.patch_status("agentpools", "ns", "p", {"replicas": 2})
        assert scripted.credentials == {"Bearer token-1", "Bearer token-2"}
    finally:
        await kube.aclose()
