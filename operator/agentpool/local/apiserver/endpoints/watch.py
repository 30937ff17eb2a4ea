"""Watch streams: newline-delimited JSON events, as kubectl, client-go, the kubernetes client and
kopf read them.

A watch starts from a resource version (only later changes), from nothing or "0" (a synthetic
ADDED per current object first), or with ``sendInitialEvents`` (ADDED per object, then a BOOKMARK
marked ``k8s.io/initial-events-end``). It follows the resource's event log, filters by namespace
and selectors (an edit that moves an object into or out of a selector becomes ADDED or DELETED,
the latter with the object as it last matched),
sends bookmarks while idle when asked, and ends at ``timeoutSeconds``. A resource version older
than the log, a reader that falls behind it, or a compaction, gets an in-stream ERROR with code
410, which reflectors and kopf answer by listing again. ``handlers`` calls ``serve_watch``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from agentpool.local.apiserver.endpoints.table import build_table
from agentpool.local.apiserver.errors import ApiError, Cause, expired, invalid
from agentpool.local.apiserver.registry.core import Core
from agentpool.local.apiserver.resources import ResourceType
from agentpool.local.apiserver.storage.selectors import Predicate
from agentpool.local.apiserver.storage.store import Event, Obj

DEFAULT_TIMEOUT = 1800.0


@dataclass(frozen=True)
class WatchRequest:
    """The parsed query of a watch."""

    namespace: str | None
    match: Predicate | None
    resource_version: str | None
    timeout: float
    bookmarks: bool
    initial_events: bool | None
    rv_match: str | None
    table: str | None


def _line(kind: str, body: bytes) -> bytes:
    return b'{"type":"' + kind.encode() + b'","object":' + body + b"}\n"


def _selected(event: Event, request: WatchRequest) -> tuple[str, Obj] | None:
    """What a watcher sees of ``event``; None when it is outside the watch."""
    namespace = request.namespace
    if namespace is not None and event.obj["metadata"].get("namespace", "") != namespace:
        return None
    match = request.match
    if match is None or event.type == "BOOKMARK":
        return event.type, event.obj
    now = match(event.obj)
    if event.type != "MODIFIED":
        return (event.type, event.obj) if now else None
    was = event.previous is not None and match(event.previous)
    if now:
        return ("MODIFIED" if was else "ADDED"), event.obj
    if not was or event.previous is None:
        return None
    # As the API server's watch cache does: the object as the watcher last matched it, at the
    # new resourceVersion (a watcher resumes from there).
    previous = dict(event.previous)
    previous["metadata"] = {
        **event.previous["metadata"],
        "resourceVersion": event.obj["metadata"].get("resourceVersion"),
    }
    return "DELETED", previous


def check_initial_events(rt: ResourceType, request: WatchRequest) -> None:
    if not request.initial_events:
        return
    if request.rv_match != "NotOlderThan":
        cause = Cause(
            "resourceVersionMatch",
            "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            "FieldValueForbidden",
        )
        raise invalid(rt, "", [cause])
    if not request.bookmarks:
        cause = Cause(
            "allowWatchBookmarks",
            "Required value: allowWatchBookmarks must be set "
            "to true when sendInitialEvents is true",
            "FieldValueRequired",
        )
        raise invalid(rt, "", [cause])


async def serve_watch(
    http: web.Request,
    core: Core,
    rt: ResourceType,
    request: WatchRequest,
    *,
    bookmark_interval: float,
    stopping: Callable[[], bool],
) -> web.StreamResponse:
    """Stream events until the timeout, the client leaves, or the server stops."""
    check_initial_events(rt, request)
    bucket = core.store.bucket(rt.key)
    log = bucket.log
    first: list[bytes] = []
    columns = True

    def encode(kind: str, obj: Obj, event: Event | None) -> bytes:
        """One event line; a plain watch reuses the event's cached encoding."""
        nonlocal columns
        if request.table is None:
            body = (
                event.encoded()
                if event is not None
                else json.dumps(obj, separators=(",", ":")).encode()
            )
            return _line(kind, body)
        table = build_table(
            rt,
            [obj],
            resource_version=obj["metadata"].get("resourceVersion", ""),
            include=request.table,
            with_columns=columns,
        )
        columns = False
        return _line(kind, json.dumps(table, separators=(",", ":")).encode())

    rv = request.resource_version
    if request.initial_events or (rv in (None, "", "0") and request.initial_events is not False):
        match = request.match
        for obj in bucket.items(request.namespace):
            if match is None or match(obj):
                first.append(encode("ADDED", obj, None))
        seq = log.end
        if request.initial_events:
            mark = {
                "kind": rt.kind,
                "apiVersion": rt.api_version,
                "metadata": {
                    "resourceVersion": str(core.store.rv),
                    "annotations": {"k8s.io/initial-events-end": "true"},
                },
            }
            first.append(_line("BOOKMARK", json.dumps(mark).encode()))
    elif rv in (None, "", "0"):
        seq = log.end
    else:
        try:
            wanted = int(rv)
        except ValueError:
            raise ApiError(400, "BadRequest", f'invalid resource version: "{rv}"') from None
        found = log.seq_after(wanted)
        seq = -1 if found is None else found
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    await response.prepare(http)
    try:
        if seq < 0:
            await _expire(response, int(rv or 0), log.floor_rv + 1)
            return response
        if first:
            await response.write(b"".join(first))
        last_rv = core.store.rv if rv in (None, "", "0") else int(rv)
        epoch = log.epoch
        deadline = time.monotonic() + request.timeout
        last_sent = time.monotonic()
        while not stopping() and not log.closed:
            events = log.read(seq)
            if events is None or log.epoch != epoch:
                await _expire(response, last_rv, log.floor_rv + 1)
                return response
            if events:
                seq += len(events)
                last_rv = events[-1].rv
                lines = []
                for event in events:
                    seen = _selected(event, request)
                    if seen is not None:
                        # The event's cached encoding, unless the watcher sees another object.
                        cached = event if seen[1] is event.obj else None
                        lines.append(encode(seen[0], seen[1], cached))
                if lines:
                    await response.write(b"".join(lines))
                    last_sent = time.monotonic()
                continue
            now = time.monotonic()
            if now >= deadline:
                break
            if request.bookmarks and now - last_sent >= bookmark_interval:
                mark = {
                    "kind": rt.kind,
                    "apiVersion": rt.api_version,
                    "metadata": {"resourceVersion": str(core.store.rv)},
                }
                await response.write(_line("BOOKMARK", json.dumps(mark).encode()))
                last_sent = now
            wait = min(deadline - now, bookmark_interval if request.bookmarks else deadline - now)
            await log.wait(seq, max(wait, 0.01))
    except (ConnectionResetError, ConnectionError):
        return response
    return response


async def _expire(response: web.StreamResponse, requested: int, oldest: int) -> None:
    status = expired(requested, oldest).status()
    await response.write(_line("ERROR", json.dumps(status).encode()))
