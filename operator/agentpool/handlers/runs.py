"""The PoolRun controller: a kopf daemon per run that drives the run engine.

The daemon resolves the run's settings (the pool's timeouts as defaults), opens its source,
restores its progress from status (and the result ConfigMaps) after a restart, and awaits
:class:`agentpool.runs.engine.RunEngine`. ``spec.suspend`` changes reach the engine as they are
watched. A finished run with ``ttlSecondsAfterFinished`` is deleted that long after it ended.
What the daemon decides around the engine is :mod:`agentpool.runs.lifecycle`'s; :func:`register`
binds the module-level handlers to kopf.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable, Mapping
from typing import Any

import kopf

from agentpool import metrics
from agentpool.api import (
    AgentPoolSpec,
    PoolRunSpec,
    PoolRunStatus,
    RawRunStatus,
    SpecError,
    parse_spec,
)
from agentpool.api.conditions import now_time
from agentpool.api.raw import raw_body
from agentpool.api.reasons import Reason
from agentpool.handlers import replicas, serving
from agentpool.handlers.dispatch import BrokerDispatcher
from agentpool.handlers.registration import KindHandlers
from agentpool.handlers.runtime import ObjectKey, Runtime
from agentpool.handlers.sources import HttpItemSource
from agentpool.io import events
from agentpool.io.journal import FileJournal
from agentpool.io.kube import ObjectNotFound
from agentpool.io.sources import SourceClient
from agentpool.pool.manifests import owner_reference
from agentpool.pool.pods import epoch
from agentpool.runs import lifecycle
from agentpool.runs.config import config_from_spec
from agentpool.runs.engine import RunEngine
from agentpool.runs.sources import ItemSource, configmap_source, inline_source, source_digest

RUN_LABEL = "agentpool.dev/run"


class KubeSink:
    """Where a run's progress goes: its status, its result ConfigMaps and its Events."""

    def __init__(self, runtime: Runtime, body: kopf.Body) -> None:
        self._runtime = runtime
        self._body = body
        self._namespace = str(body["metadata"]["namespace"])
        self._name = str(body["metadata"]["name"])
        # Result ConfigMaps this run has written, which later writes patch rather than create.
        self._written: set[str] = set()

    async def write(self, patch: RawRunStatus) -> None:
        # kopf keeps a daemon's body up to date, so this is the generation the engine now follows.
        generation = self._body["metadata"].get("generation")
        if generation is not None:
            patch = {**patch, "observedGeneration": generation}
            if "conditions" in patch:
                patch["conditions"] = [
                    {**condition, "observedGeneration": generation}
                    for condition in patch["conditions"]
                ]
        with contextlib.suppress(ObjectNotFound):
            await self._runtime.kube.patch_status("poolruns", self._namespace, self._name, patch)

    async def write_results_configmap(self, name: str, data: dict[str, str]) -> None:
        await self._runtime.kube.apply_configmap(
            self._namespace,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": name,
                    "namespace": self._namespace,
                    "labels": {RUN_LABEL: self._name, "app.kubernetes.io/managed-by": "agentpool"},
                    "ownerReferences": [owner_reference(dict(self._body))],
                },
                "data": data,
            },
            exists=name in self._written,
        )
        self._written.add(name)

    async def event(self, type: str, reason: str, message: str) -> None:
        events.post(self._body, type=type, reason=reason, message=message)


async def open_source(
    runtime: Runtime, namespace: str, spec: PoolRunSpec, raw_source: Any
) -> tuple[ItemSource, str]:
    """The run's source, and the digest of what it was opened on (see :func:`source_digest`)."""
    source = spec.source
    if source.items is not None:
        return inline_source(list(source.items)), source_digest(raw_source)
    if source.config_map_ref is not None:
        ref = source.config_map_ref
        try:
            configmap = await runtime.kube.read_configmap(namespace, ref.name)
        except ObjectNotFound:
            return configmap_source(ref.name, ref.key, None), source_digest(raw_source)
        data = dict(configmap.get("data") or {})
        digest = source_digest(raw_source, data.get(ref.key))
        return configmap_source(ref.name, ref.key, data), digest
    assert source.http is not None  # the CRD admits exactly one source
    return HttpItemSource(SourceClient(source.http.url)), source_digest(raw_source)


async def pool_timeouts(
    runtime: Runtime, namespace: str, *, pools: Iterable[str]
) -> dict[str, AgentPoolSpec]:
    """The spec of each pool a run names, whose timeouts it follows unless it sets its own; a
    pool not found yet is left out (the API's defaults apply)."""
    found = {}
    for pool in sorted(set(pools)):
        stored = await serving.find_pool(runtime, namespace, pool)
        if stored is not None:
            found[pool] = parse_spec(AgentPoolSpec, stored.get("spec"))
    return found


async def pin_source(
    runtime: Runtime, body: kopf.Body, spec: PoolRunSpec, raw_source: Any, status: PoolRunStatus
) -> tuple[ItemSource, str]:
    """The run's source and its digest, which a run's first start records in status before any
    item starts, so that a restarted operator can tell whether the source changed since."""
    namespace = str(body["metadata"]["namespace"])
    source, digest = await open_source(runtime, namespace, spec, raw_source)
    if status.source_digest is None:
        await KubeSink(runtime, body).write({"sourceDigest": digest})
        status.source_digest = digest
    return source, digest


def register(registry: kopf.OperatorRegistry, runtime: Runtime) -> None:
    """Bind the PoolRun handlers to ``registry``, each given ``runtime``."""
    handlers = KindHandlers("poolruns", registry, runtime)
    handlers.on_event(run_event)
    handlers.daemon(run_loop)


async def run_event(
    runtime: Runtime,
    /,
    type: str | None,
    body: kopf.Body,
    name: str,
    namespace: str | None,
    **_: Any,
) -> None:
    """A run changed: its engine follows the spec; a deleted run's journal and series go."""
    key = (namespace or "", name)
    if type != "DELETED":
        follow_spec(runtime, key, body)
        return
    if await replicas.moved(runtime, "poolruns", raw_body(body)):
        # Not deleted: relabelled to the replica its pool went to, which resumes it from its
        # status; its engine here stops (kopf stops no daemon of an object that left its watch).
        runtime.runs.stop(key)
        return
    # Whenever a run goes, finished long ago or not, its journal goes, and its series a
    # while later (a scrape still sees their last values), unless it is back by then.
    if runtime.journals is not None:
        runtime.journals.discard(lifecycle.run_uid(body["metadata"]))

    def forget() -> None:
        if key not in runtime.runs.engines:
            metrics.forget_run(*key)

    asyncio.get_running_loop().call_later(metrics.FORGET_AFTER_SECONDS, forget)


def follow_spec(runtime: Runtime, key: ObjectKey, body: kopf.Body) -> None:
    """Hand a running engine the run's spec.suspend, and stop its source if spec.source changed.

    Every event carries the current spec.suspend: no last-handled state is kept on the run for
    it (kopf's would hold the inline items, and cost a patch of the whole object), and following
    it is idempotent.
    """
    engine = runtime.runs.engines.get(key)
    if engine is None:
        return
    spec = body.get("spec") or {}
    engine.set_suspended(bool(spec.get("suspend")))
    before = runtime.runs.pinned.get(key, (0, ""))
    pinned, changed = lifecycle.repin(
        before, body["metadata"].get("generation"), spec.get("source")
    )
    if pinned != before:
        runtime.runs.pinned[key] = pinned
    if changed:
        engine.stop_source(Reason.SOURCE_CHANGED, lifecycle.source_changed(spec.get("source")))


async def run_loop(
    runtime: Runtime, /, body: kopf.Body, stopped: kopf.DaemonStopped, **_: Any
) -> None:
    """The run's daemon: drive the engine to the end, then delete the run after its ttl."""
    key = (body.metadata.namespace or "", body.metadata.name)
    status: Mapping[str, Any] = body.get("status") or {}
    if status.get("phase") not in lifecycle.FINISHED:
        completion = await drive(runtime, body, key, status, stopped)
        if completion is None:
            return
    else:
        completion = epoch(status.get("completionTime")) or time.time()
        if runtime.journals is not None:
            # Left by an operator that stopped between the last write and removing it.
            runtime.journals.discard(lifecycle.run_uid(body["metadata"]))
    ttl = (body.get("spec") or {}).get("ttlSecondsAfterFinished")
    remaining = lifecycle.ttl_remaining(completion, ttl, time.time())
    if remaining is None:
        return
    if remaining > 0 and await stopped.wait(remaining):
        return
    await runtime.kube.delete_custom("poolruns", *key)


async def drive(
    runtime: Runtime,
    body: kopf.Body,
    key: ObjectKey,
    status: Mapping[str, Any],
    stopped: kopf.DaemonStopped,
) -> float | None:
    """Run the engine until the run ends; when it ended, or None if it did not (stopped first,
    or its spec is invalid)."""
    # On the brokers' clock: the run's first items wait in line from here, not from when the
    # reads and writes of its start are done.
    arrived = time.time()
    raw_spec = dict(body.get("spec") or {})
    try:
        spec = parse_spec(PoolRunSpec, raw_spec)
    except SpecError as error:
        # The CRD's schema admits nearly nothing invalid; what slips through (an older CRD,
        # say) ends the run with a condition that names each field to fix.
        message = "the spec is invalid: " + "; ".join(error.errors)
        patch = lifecycle.invalid_spec_status(message, finished=now_time())
        await KubeSink(runtime, body).write(patch)
        return None
    engine, journal = await build_engine(
        runtime, body, key, spec, raw_source=raw_spec.get("source"), status=status, arrived=arrived
    )
    generation = int(body["metadata"].get("generation") or 0)
    digest = source_digest(raw_spec.get("source"))
    runtime.runs.start(key, engine, generation=generation, digest=digest)
    task = asyncio.ensure_future(engine.run())
    runtime.runs.running(key, next(iter(lifecycle.named_pools(spec)), ""), task)
    stop = asyncio.ensure_future(stopped.wait())
    try:
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        runtime.runs.end(key, engine)
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if journal is not None:
            journal.close()
    if not task.done() or task.cancelled():
        return None
    end = task.result()
    metrics.RUNS_FINISHED.labels(key[0], end.phase, end.reason).inc()
    return time.time()


async def read_inputs(
    runtime: Runtime,
    body: kopf.Body,
    spec: PoolRunSpec,
    raw_source: Any,
    status: PoolRunStatus,
) -> tuple[ItemSource, str, dict[str, AgentPoolSpec]]:
    """The run's pinned source, its digest and its pools' specs, read side by side, since its
    first items wait on both; a source opened for a start that fails is closed again."""
    namespace = str(body["metadata"]["namespace"])
    reading = asyncio.ensure_future(
        pool_timeouts(runtime, namespace, pools=lifecycle.named_pools(spec))
    )
    try:
        source, digest = await pin_source(runtime, body, spec, raw_source, status)
    except BaseException:
        reading.cancel()
        # Its own error, if any, is not the one to report; retrieve it so none is logged.
        reading.add_done_callback(lambda done: done.cancelled() or done.exception())
        raise
    try:
        pools = await reading
    except BaseException:
        await source.close()
        raise
    return source, digest, pools


async def build_engine(
    runtime: Runtime,
    body: kopf.Body,
    key: ObjectKey,
    spec: PoolRunSpec,
    *,
    raw_source: Any,
    status: Mapping[str, Any],
    arrived: float | None = None,
) -> tuple[RunEngine, FileJournal | None]:
    """The run's engine and journal, with its progress restored from status and its result
    ConfigMaps, and its source stopped at once when it no longer matches the digest the run
    started on."""
    namespace, name = key
    # Parsed before anything is opened, so a status that does not read leaks no source or journal.
    restored = parse_spec(PoolRunStatus, status, root="status")
    source, digest, pools = await read_inputs(runtime, body, spec, raw_source, restored)
    config = config_from_spec(name, spec, pools=pools)
    configmaps = {}
    for ref in restored.result_refs:
        with contextlib.suppress(ObjectNotFound):
            data = (await runtime.kube.read_configmap(namespace, ref.name)).get("data")
            configmaps[ref.name] = dict(data or {})
    # A run that starts suspended was not waiting: its first items queue when it resumes.
    dispatcher = BrokerDispatcher(
        runtime, namespace, arrived=None if spec.suspend else arrived, backdated=config.spec.cap
    )
    uid = lifecycle.run_uid(body["metadata"])
    journal = runtime.journals.open(uid) if runtime.journals is not None else None
    engine = RunEngine(
        config,
        source=source,
        dispatcher=dispatcher,
        sink=KubeSink(runtime, body),
        status=restored,
        configmaps=configmaps,
        suspended=spec.suspend,
        journal=journal,
        settings=runtime.settings.runs,
    )
    if restored.source_digest != digest:
        engine.stop_source(Reason.SOURCE_CHANGED, lifecycle.source_changed(raw_source))
    return engine, journal
