"""Watches agent pods and feeds what it sees to their pool, without polling.

kopf lists and watches pods carrying the pool label (filtered on the server). Each event updates
the pool's view of its pods and hands readiness changes to the broker at once, so a waiter is
served the moment its agent turns Ready; then it wakes the pool's reconcile loop. The handler is a
coroutine: kopf runs plain functions in worker threads, and the broker lives on the event loop.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import kopf

from agentpool.api.raw import raw_body
from agentpool.handlers import pools
from agentpool.handlers.runtime import Runtime
from agentpool.pool.manifests import POOL_LABEL, owned_by


def register(registry: kopf.OperatorRegistry, runtime: Runtime) -> None:
    """Bind the pod watch to ``registry``, given ``runtime``."""
    kopf.on.event(
        "v1", "pods", id="pod_event", labels={POOL_LABEL: kopf.PRESENT}, registry=registry
    )(functools.partial(pod_event, runtime))


async def pod_event(
    runtime: Runtime,
    /,
    event: kopf.RawEvent,
    namespace: str | None,
    labels: Mapping[str, str],
    **_: Any,
) -> None:
    """An agent pod was added, changed or deleted: tell its pool, or keep it for a pool whose
    loop has not started yet."""
    pod = raw_body(event["object"])
    key = (namespace or "", labels[POOL_LABEL])
    handle = runtime.pools.watched(key)
    if handle is None and runtime.elsewhere(key):
        # Another replica's pool: its pods are that replica's to follow, kept here for none.
        runtime.pools.orphan_pods.pop(key, None)
        runtime.pools.deleted_pods.pop(key, None)
        return
    seen = handle.pods if handle is not None else runtime.pools.orphan_pods.setdefault(key, {})
    name = pod["metadata"]["name"]
    if handle is not None and not owned_by(pod, handle.uid):
        # A pod of an earlier pool of this name, deleted with it: not this pool's agent.
        return
    if event.get("type") == "DELETED":
        known = seen.pop(name, None)
        uid = str(pod["metadata"].get("uid") or "")
        if runtime.pools.get(key) is None:
            # The pool's loop may be listing its pods still: the listing must not revive it.
            runtime.pools.deleted_pods.setdefault(key, set()).add(uid)
        elif known is None and handle is not None:
            # Deleted before the answer to the pool's create came: that must not revive it.
            handle.deleted_unknown.add(uid)
    else:
        seen[name] = pod
    if handle is not None:
        pools.sync_broker(handle)
        handle.poke()
