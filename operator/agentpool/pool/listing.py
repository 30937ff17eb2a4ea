"""A starting pool's pods: its own listing joined with the pod events seen meanwhile.

A pool loop that starts (after an operator restart, say) lists its pods once, while the pod watch
keeps delivering events; either may be the newer about a pod. :func:`join_listing` keeps, for each
pod, the newer of the two, and never brings back one an event said was deleted. The pool handler
calls it in :func:`agentpool.handlers.pools.start_pool`; pure, so its cases are a table.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from agentpool.api.raw import RawBody


def version(pod: Mapping[str, Any]) -> int | None:
    """The pod's resourceVersion as a number, or None when it is not one."""
    found = str((pod.get("metadata") or {}).get("resourceVersion") or "")
    return int(found) if found.isdigit() else None


def join_listing(
    listed: Iterable[RawBody],
    *,
    seen: Mapping[str, RawBody],
    deleted: Collection[str],
) -> dict[str, RawBody]:
    """The pool's pods by name: those ``seen`` in events, and each ``listed`` one unless its uid
    is among those ``deleted`` by an event or an event showed it at a later version."""
    pods = dict(seen)
    for pod in listed:
        metadata = pod.get("metadata") or {}
        if metadata.get("uid") in deleted:
            continue
        name = str(metadata.get("name"))
        known = pods.get(name)
        if known is None:
            pods[name] = pod
            continue
        ours, theirs = version(pod), version(known)
        if ours is not None and theirs is not None and ours > theirs:
            pods[name] = pod
    return pods
