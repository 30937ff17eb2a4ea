"""Events about the operator's objects, as ``kubectl describe`` and ``kubectl events`` show them.

kopf posts each one (:func:`post`) in the background, on its own API session and with its own
retries, so a handler never waits on an Event and a refused one costs the handler nothing. Those
the operator posts many alike of, one per lease, go through an :class:`EventSeries` instead: one
Event object per window counts them all, so a lease costs no write of its own for them. This
module is the one place the operator asks for an Event, so that :mod:`agentpool.io` stays its
only edge.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import kopf

from agentpool.api.raw import RawBody

#: Who the Events say posted them, as kopf's own say (``settings.posting.reporting_component``).
COMPONENT = "agentpool"
#: The longest message an Event holds.
MESSAGE_LIMIT = 1024
#: A series quiet for this many windows is forgotten: its next Event is a first one again.
FORGET_WINDOWS = 10
#: How long a stopping operator waits for the Events it still holds to be written.
CLOSE_SECONDS = 5.0

log = logging.getLogger(__name__)


def post(obj: Mapping[str, Any], *, type: str, reason: str, message: str) -> None:
    """An Event of ``type`` ("Normal" or "Warning") about ``obj``, the object as the API server
    sent it, posted in the background."""
    kopf.event(obj, type=type, reason=reason, message=message)  # type: ignore[arg-type]


class EventApi(Protocol):
    """The one call a series of Events makes (:meth:`agentpool.io.kube.Kube.create_event`)."""

    async def create_event(self, namespace: str, body: Mapping[str, Any]) -> RawBody: ...


#: A series: the object's namespace, name and uid, the Events' type and reason.
SeriesKey = tuple[str, str, str, str, str]


@dataclass
class _Window:
    """The Events of one series not written yet: how many, since and until when (RFC 3339),
    and the latest one's message."""

    count: int
    first: str
    last: str
    message: str


@dataclass
class _Series:
    regarding: dict[str, str]
    type: str
    reason: str
    #: The event loop's time of the series' last write, if any.
    written_at: float | None = None
    pending: _Window | None = None
    writing: asyncio.Task[None] | None = None


class EventSeries:
    """Events the operator posts many alike of (a pool's leases bound, and expired), written as
    Kubernetes writes a series of similar Events: one Event object stands for several, its
    ``count`` saying how many, from its ``firstTimestamp`` to its ``lastTimestamp``, with the
    latest one's message (``kubectl describe`` shows "x17 over 28s").

    The first of a series (the same object, type and reason) is written at once; those that
    follow within ``window_seconds`` of a write are counted and written together once that
    window has passed: one create per window however many leases bind in it, and none lost.
    """

    def __init__(self, api: EventApi, *, window_seconds: float, instance: str = "") -> None:
        self._api = api
        self._window = window_seconds
        self._instance = instance or socket.gethostname()
        self._series: dict[SeriesKey, _Series] = {}
        #: Set as the operator stops: the windows still open are written at once.
        self._closing = asyncio.Event()
        #: The event loop's time quiet series were last looked for.
        self._swept_at = 0.0

    def post(self, regarding: Mapping[str, str], *, type: str, reason: str, message: str) -> None:
        """One Event of ``type`` and ``reason`` about ``regarding`` (its apiVersion, kind,
        namespace, name and uid): written now, or with the others of its window."""
        if self._closing.is_set():
            log.warning(
                "not posting %s Event about %s: the operator stops", reason, regarding["name"]
            )
            return
        loop = asyncio.get_running_loop()
        # The namespace and name too: a pool whose uid is not known is not another's.
        key = (regarding["namespace"], regarding["name"], regarding["uid"], type, reason)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = _Series(dict(regarding), type, reason)
        stamp = _stamp()
        window = series.pending
        if window is None:
            series.pending = _Window(1, stamp, stamp, message)
        else:
            window.count, window.last, window.message = window.count + 1, stamp, message
        if series.writing is None:
            since = None if series.written_at is None else loop.time() - series.written_at
            wait = 0.0 if since is None or since >= self._window else self._window - since
            series.writing = loop.create_task(self._write_after(key, series, wait))
        if loop.time() - self._swept_at >= self._window:
            self._swept_at = loop.time()
            self._forget_quiet(loop.time())

    async def _write_after(self, key: SeriesKey, series: _Series, wait: float) -> None:
        try:
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closing.wait(), wait)
            window, series.pending = series.pending, None
            if window is not None:
                series.written_at = asyncio.get_running_loop().time()
                try:
                    await self._create(series, window)
                except asyncio.CancelledError:
                    _unwritten(series, window, "the operator stopped before the API server took it")
                    raise
        finally:
            series.writing = None
        if series.pending is not None and self._series.get(key) is series:
            # More came while this one was written: the next window's write.
            series.writing = asyncio.get_running_loop().create_task(
                self._write_after(key, series, self._window)
            )

    async def _create(self, series: _Series, window: _Window) -> None:
        namespace = series.regarding["namespace"]
        body = {
            "metadata": {"generateName": "agentpool-", "namespace": namespace},
            "involvedObject": series.regarding,
            "type": series.type,
            "reason": series.reason,
            "message": _shortened(window.message),
            "count": window.count,
            "firstTimestamp": window.first,
            "lastTimestamp": window.last,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self._instance,
        }
        try:
            await self._api.create_event(namespace, body)
        except Exception as error:  # an Event is never worth failing the work it tells of
            _unwritten(series, window, f"posting it failed ({error})")

    def _forget_quiet(self, now: float) -> None:
        """Drop the series with nothing pending and no write for many windows."""
        quiet = [
            key
            for key, series in self._series.items()
            if series.writing is None
            and series.pending is None
            and series.written_at is not None
            and now - series.written_at > FORGET_WINDOWS * self._window
        ]
        for key in quiet:
            del self._series[key]

    async def close(self) -> None:
        """Write what every series holds at once, not after its window (the operator stops),
        waiting ``CLOSE_SECONDS`` at most for the API server to take them."""
        self._closing.set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CLOSE_SECONDS
        while writing := {s.writing for s in self._series.values() if s.writing is not None}:
            left = deadline - loop.time()
            if left <= 0:
                for task in writing:
                    task.cancel()
                await asyncio.wait(writing)
                break
            # A write that found more come meanwhile starts the next one: wait for that too.
            await asyncio.wait(writing, timeout=left)
        for series in self._series.values():
            if series.pending is not None:
                _unwritten(series, series.pending, "the operator stopped before it was written")


def _unwritten(series: _Series, window: _Window, why: str) -> None:
    log.warning(
        "%s Event about %s unwritten, %d of them: %s",
        series.reason,
        series.regarding["name"],
        window.count,
        why,
    )


def _stamp() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _shortened(message: str) -> str:
    """An Event's message fits the API server's limit (1 KiB), its end kept."""
    if len(message) <= MESSAGE_LIMIT:
        return message
    return message[: MESSAGE_LIMIT // 2 - 2] + " .. " + message[-(MESSAGE_LIMIT // 2 - 2) :]
