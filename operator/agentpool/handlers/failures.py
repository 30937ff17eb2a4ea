"""What a pool's loop does with the agents it retires: count failures, keep or delete their pods.

:mod:`agentpool.handlers.pools` calls :func:`set_aside` for each agent a pass retires and
:func:`release_kept` once per pass. An agent that failed before it ever turned Ready counts toward
the crash back-off and the Degraded condition. The pod of an agent that failed, whose processes
are gone, is kept for a post-mortem as :mod:`agentpool.pool.postmortem` decides, and handed to
deletion once it expires; every other retired pod is deleted at once.
"""

from __future__ import annotations

from agentpool.api.reasons import RetireReason
from agentpool.handlers.runtime import PoolHandle
from agentpool.pool.pods import failed_at, failure_of, is_failed, is_terminal
from agentpool.pool.postmortem import expired
from agentpool.pool.status import NAMED_PODS

#: The longest a pool waits before replacing agents that keep failing at start-up.
CRASH_BACKOFF_MAX_SECONDS = 60.0
#: Pod timestamps have whole seconds: a failure this close before the loop began may be new.
TIMESTAMP_SECONDS = 1.0


def set_aside(handle: PoolHandle, name: str, reason: str, now: float) -> None:
    """The agent `name` was retired for `reason`: note its failure, then keep its pod for a
    post-mortem (it failed and ended) or queue it for deletion."""
    note_failure(handle, name, now)
    pod = handle.pods.get(name)
    if reason == RetireReason.FAILED and pod is not None and is_terminal(pod):
        handle.kept[name] = failed_at(pod) or now
    else:
        handle.undeleted.add(name)


def release_kept(handle: PoolHandle, now: float) -> None:
    """Queue for deletion the kept pods whose time is up; forget those already gone."""
    for name in [name for name in handle.kept if name not in handle.pods]:
        del handle.kept[name]
    for name in expired(handle.kept, now):
        del handle.kept[name]
        handle.undeleted.add(name)


def note_failure(handle: PoolHandle, name: str, now: float) -> None:
    """Remember a pod that failed before it ever turned Ready, for back-off and Degraded."""
    pod = handle.pods.get(name)
    if pod is None or not is_failed(pod):
        return
    if name in handle.first_ready:
        handle.crash_failures, handle.start_failures = 0, []
        return
    failed = failed_at(pod)
    if failed is not None and failed < handle.started_at - TIMESTAMP_SECONDS:
        # A pod kept from before this loop began (an operator restart): counted back then.
        return
    handle.crash_failures += 1
    handle.start_failures = [*handle.start_failures[-(NAMED_PODS - 1) :], failure_of(pod)]
    delay = min(CRASH_BACKOFF_MAX_SECONDS, 2.0 ** (handle.crash_failures - 1))
    handle.crash_backoff_until = now + delay
