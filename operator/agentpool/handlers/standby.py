"""Whether this replica acts, or stands by for a peer: what its gateway's readiness says.

With several replicas sharing a kopf peering, the one of highest priority acts and kopf pauses
the others; a paused replica serves no pool, so its gateway must take no calls. kopf keeps who is
alive in the peering object (``status``: each peer's priority, lifetime and when it was last
seen) and pauses a replica while another live peer's priority is as high or higher.
:func:`acts` applies the same rule to the object as read, and :func:`follow_peers` reads it every
few seconds into ``runtime.serving``, which ``GET /readyz`` reports, so a Service sends calls to
the acting replica only. A replica without peering always acts.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Collection, Mapping
from typing import Any

from agentpool.handlers.runtime import Runtime

log = logging.getLogger(__name__)


def acts(peers: Mapping[str, Any], *, identity: str, priority: int, now: datetime.datetime) -> bool:
    """Whether a replica of ``identity`` and ``priority`` acts, given the peering object's
    ``status``: no other peer still alive has a priority as high or higher."""
    for name, info in peers.items():
        if name == identity or not isinstance(info, Mapping):
            continue
        try:
            seen = datetime.datetime.fromisoformat(str(info["lastseen"]))
            lifetime = datetime.timedelta(seconds=float(info["lifetime"]))
            other = int(info["priority"])
        except (KeyError, TypeError, ValueError):
            continue
        if seen.tzinfo is None:
            seen = seen.replace(tzinfo=datetime.UTC)
        if seen + lifetime > now and other >= priority:
            return False
    return True


def peering_paths(name: str, namespaces: Collection[str]) -> list[str]:
    """The peering objects of a replica: the cluster's, or each served namespace's (a namespace
    pattern has none of its own to read)."""
    if not namespaces:
        return [f"/apis/kopf.dev/v1/clusterkopfpeerings/{name}"]
    return [
        f"/apis/kopf.dev/v1/namespaces/{namespace}/kopfpeerings/{name}"
        for namespace in namespaces
        if not any(mark in namespace for mark in "*?[!")
    ]


async def follow_peers(
    runtime: Runtime, paths: list[str], *, identity: str, priority: int, every: float
) -> None:
    """Keep ``runtime.serving`` to whether this replica acts, from the peering objects read
    every ``every`` seconds; a read that fails leaves the last word standing. A replica seen to
    act is no longer paused for its leases, though it serves no pool yet."""
    runtime.serving = False
    while True:
        try:
            statuses = [(await runtime.kube.request("GET", path)).get("status") for path in paths]
        except Exception as error:  # the API server away: say nothing new until it answers
            log.debug("reading the peering objects failed: %s", error)
        else:
            now = datetime.datetime.now(datetime.UTC)
            runtime.serving = all(
                acts(status or {}, identity=identity, priority=priority, now=now)
                for status in statuses
            )
            if runtime.serving:
                runtime.leases.resume()
        await asyncio.sleep(every)
