"""A PoolRun as its submitter follows it: results as they are recorded, the end, the status.

``Client.submit`` creates the PoolRun and hands back a :class:`Run`. :meth:`Run.results` follows
the run on one watch and yields each item's :class:`~agentpool.client.records.Result` once, as
the operator records it, whether in the run's status or in a result ConfigMap;
:meth:`Run.wait` waits for the end and raises :class:`~agentpool.client.errors.RunFailed` when
the run failed. ``run.status`` is the status as last seen.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from agentpool.api import PoolRunStatus
from agentpool.client.cluster import Cluster
from agentpool.client.errors import RUN_DELETED, NotFound, run_error
from agentpool.client.records import Result, ResultTracker

PLURAL = "poolruns"
FINISHED = frozenset({"Succeeded", "Failed"})


def finished(status: Mapping[str, Any]) -> bool:
    return status.get("phase") in FINISHED


class Run:
    """One PoolRun: ``name``, ``status`` as last seen, its results and its end."""

    def __init__(self, cluster: Cluster, obj: Mapping[str, Any]) -> None:
        self._cluster = cluster
        self.name = str(obj["metadata"]["name"])
        self.namespace = cluster.namespace
        self._version: str | None = obj["metadata"].get("resourceVersion")
        self._raw: Mapping[str, Any] = obj.get("status") or {}
        self._status: PoolRunStatus | None = None

    def __repr__(self) -> str:
        return f"Run({self.namespace}/{self.name}, phase={self._raw.get('phase')})"

    @property
    def status(self) -> PoolRunStatus:
        """The run's status as last seen (by :meth:`refresh`, :meth:`results` or :meth:`wait`)."""
        if self._status is None:
            self._status = PoolRunStatus.model_validate(self._raw)
        return self._status

    def _saw(self, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        self._raw = obj.get("status") or {}
        self._version = obj["metadata"].get("resourceVersion") or self._version
        self._status = None
        return self._raw

    async def refresh(self) -> PoolRunStatus:
        """Read the run's status now."""
        self._saw(await self._cluster.get(PLURAL, self.name))
        return self.status

    async def _statuses(self) -> AsyncGenerator[Mapping[str, Any], None]:
        """The run's status now, then at each change, until it has finished."""
        status = self._saw(await self._cluster.get(PLURAL, self.name))
        yield status
        if finished(status):
            return
        watch = self._cluster.watch(PLURAL, self.name, version=self._version)
        async with contextlib.aclosing(watch) as events:
            async for kind, obj in events:
                if kind == "DELETED":
                    raise NotFound(RUN_DELETED, f"run {self.namespace}/{self.name} was deleted")
                status = self._saw(obj)
                yield status
                if finished(status):
                    return

    async def results(self) -> AsyncGenerator[Result, None]:
        """Each item's result, once, as the operator records it, until the run ends; those
        moved to result ConfigMaps included."""
        tracker = ResultTracker()
        async with contextlib.aclosing(self._statuses()) as statuses:
            async for status in statuses:
                for result in tracker.from_status(status):
                    yield result
                for name in tracker.unread(status):
                    data = await self._cluster.configmap_data(name)
                    for result in tracker.from_configmap(name, data):
                        yield result

    async def wait(self, timeout: float | None = None) -> PoolRunStatus:
        """Until the run ends; its status. Raises :class:`RunFailed` when it failed, and
        TimeoutError when ``timeout`` seconds pass first."""
        async with asyncio.timeout(timeout), contextlib.aclosing(self._statuses()) as statuses:
            async for _ in statuses:
                pass
        error = run_error(self.status)
        if error is not None:
            raise error
        return self.status

    async def delete(self) -> None:
        """Delete the run (and with it its result ConfigMaps)."""
        await self._cluster.delete(PLURAL, self.name)
