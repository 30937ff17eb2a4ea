"""Failed agent pods kept for a post-mortem: which of them to delete now.

An agent whose pod failed (it crashed, was killed, or never could start) leaves the pool at once:
it no longer counts toward the pool's size and is replaced. Its pod, whose processes are gone, is
kept a while so that `kubectl logs POD` and `kubectl describe pod POD` still show what the agent
wrote and how it ended: the newest KEEP_FAILED_PODS of them (as many as the Degraded condition
names), each for ``keep_failed_seconds`` of the operator's settings after it failed. The
AgentPool reconciler asks :func:`expired` on every pass and deletes what it names.
"""

from __future__ import annotations

from collections.abc import Mapping

from agentpool.pool.status import NAMED_PODS

#: Failed pods kept per pool: every pod the Degraded condition names can be looked at.
KEEP_FAILED_PODS = NAMED_PODS


def expired(
    failed: Mapping[str, float],
    now: float,
    *,
    keep_seconds: float,
    keep: int = KEEP_FAILED_PODS,
) -> list[str]:
    """The kept failed pods (name -> when it failed) to delete at `now`, by name: all but the
    newest `keep`, and any failed `keep_seconds` ago or more."""
    newest = sorted(failed, key=lambda name: (-failed[name], name))
    return sorted(
        name
        for rank, name in enumerate(newest)
        if rank >= keep or now - failed[name] >= keep_seconds
    )
