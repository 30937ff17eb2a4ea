"""Status writes ride out 409s and 5xx: the Kube wrapper retries them instead of raising.

A single conflict or server error on a status write used to raise out of the pool or run daemon,
which kopf restarts only after its back-off; under 50% injected errors a pool took 50 s to turn
Ready. These tests inject the errors at the client and prove each write lands, promptly, with a
re-read after a conflict, while errors that retrying cannot fix still raise at once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from agentpool.io.kube import Kube, NotFound


class Response:
    def read(self) -> bytes:
        return b"{}"

    def release_conn(self) -> None:
        pass


class FaultyCustomObjects:
    """CustomObjectsApi whose status patches fail with the scripted statuses, then succeed."""

    def __init__(self, faults: Iterator[int | None]) -> None:
        self.faults = faults
        self.landed: list[dict[str, Any]] = []
        self.reads = 0

    def patch_namespaced_custom_object_status(self, *args: Any, **_: Any) -> Response:
        fault = next(self.faults, None)
        if fault is not None:
            raise ApiException(status=fault, reason="injected")
        self.landed.append(args[-1])
        return Response()

    def get_namespaced_custom_object(self, *_: Any, **__: Any) -> dict[str, Any]:
        self.reads += 1
        return {"metadata": {"name": "p"}}


def kube_with(faults: list[int | None]) -> tuple[Kube, FaultyCustomObjects]:
    kube = Kube(kubernetes.client.ApiClient(kubernetes.client.Configuration()))
    custom = FaultyCustomObjects(iter(faults))
    kube._custom = custom
    return kube, custom


async def test_status_writes_land_under_half_injected_409_and_5xx() -> None:
    """Every other attempt fails (409, 500, 503, 429 in turn): all 20 writes still land, in order,
    without raising, in well under a second each, and each 409 re-reads the object first."""
    pattern = [409, None, 500, None, 503, None, 429, None]
    kube, custom = kube_with(pattern * 5)
    started = time.monotonic()
    for n in range(20):
        await kube.patch_status("agentpools", "ns", "p", {"replicas": n})
    assert custom.landed == [{"status": {"replicas": n}} for n in range(20)]
    assert custom.reads == 5
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(("status", "error"), [(404, NotFound), (422, ApiException)])
async def test_errors_retrying_cannot_fix_raise_at_once(
    status: int, error: type[Exception]
) -> None:
    """A missing object or an invalid status is not retried: the caller hears of it at once."""
    kube, custom = kube_with([status, None])
    with pytest.raises(error):
        await kube.patch_status("agentpools", "ns", "p", {"replicas": 1})
    assert custom.landed == []
