"""What a pool's loop does with the agents it retires: count failures, keep or delete their pods.

:mod:`agentpool.handlers.pools` calls :func:`set_aside` for each agent a pass retires and
:func:`drop_kept` once per pass; :mod:`agentpool.handlers.poolstatus` asks
:func:`health_ahead` for the memory with the failed agents not retired yet counted. What the
pool remembers of a retirement (a failure before Ready, a quarantine, readiness lost) and whether
a pod is kept are decided by :mod:`agentpool.pool.health`; the pod of an agent that failed, whose
processes are gone, is kept for a post-mortem as :mod:`agentpool.pool.postmortem` decides, and
handed to deletion once it expires or the plan asks it to give way to new agents under
maxUnready; every other retired pod is deleted at once.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from agentpool.handlers.runtime import PoolHandle
from agentpool.pool import ObservedAgent
from agentpool.pool.health import PoolHealth, kept_since, note_retirement, note_start_failure
from agentpool.pool.postmortem import expired


def set_aside(handle: PoolHandle, name: str, reason: str, now: float) -> None:
    """The agent `name` was retired for `reason`: remember what its retirement says of the pool,
    then keep its pod for a post-mortem (it failed and ended) or queue it for deletion."""
    health = _start_failure(handle, handle.health, name, now)
    handle.health = note_retirement(health, name, reason, now)
    since = kept_since(reason, handle.pods.get(name), now)
    if since is not None:
        handle.kept[name] = since
    else:
        handle.undeleted.add(name)


def health_ahead(handle: PoolHandle, agents: Iterable[ObservedAgent], now: float) -> PoolHealth:
    """The pool's memory with the failed agents not yet retired counted as the next pass will
    count them: their pods' events can come while a pass is under way, after it planned and
    before it writes the status, which should not name a bare PodFailed meanwhile."""
    health = handle.health
    for agent in agents:
        if agent.failed and not agent.deleting:
            health = _start_failure(handle, health, agent.name, now)
    return health


def _start_failure(handle: PoolHandle, health: PoolHealth, name: str, now: float) -> PoolHealth:
    return note_start_failure(
        health,
        handle.pods.get(name),
        ever_ready=name in handle.first_ready,
        loop_started_at=handle.started_at,
        now=now,
        backoff_cap=handle.settings.crash_backoff_max_seconds,
    )


def drop_kept(handle: PoolHandle, now: float, *, give_way: Collection[str] = ()) -> None:
    """Queue for deletion the kept pods whose time is up, and those the plan asks to give way
    to new agents or a rollout under maxUnready; forget those already gone. A kept pod gives
    way only when new agents may start now: not to one that waits out a back-off meanwhile."""
    for name in [name for name in handle.kept if name not in handle.pods]:
        del handle.kept[name]
    dropped = expired(handle.kept, now, keep_seconds=handle.settings.keep_failed_seconds)
    if handle.health.creation_hold(now) <= 0:
        dropped += [name for name in give_way if name in handle.kept]
    for name in sorted(set(dropped)):
        del handle.kept[name]
        handle.undeleted.add(name)
