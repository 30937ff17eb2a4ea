"""The PoolRun daemon's decisions around the engine: what a run is named by, which pools it
follows, when its source changed, how an invalid spec ends it, and when a finished run goes.

:mod:`agentpool.handlers.runs` starts one engine per run and follows the run's spec while it
runs; these functions decide, from values, what it then does. Pure: ``now`` is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentpool.api import PoolRunSpec, RawRunStatus
from agentpool.runs.sources import source_digest

#: The phases of a run that is over.
FINISHED = frozenset({"Succeeded", "Failed"})


def run_uid(metadata: Mapping[str, Any]) -> str:
    """What names the run's journal: its uid, so a run made again under the same name never
    reads its predecessor's."""
    return str(metadata.get("uid") or f"{metadata.get('namespace')}.{metadata.get('name')}")


def named_pools(spec: PoolRunSpec) -> list[str]:
    """The pools a run takes agents from: its poolRef, and every pool its routes name."""
    named = [spec.pool_ref.name] if spec.pool_ref is not None else []
    if spec.routes is not None:
        named += spec.routes.pools.values()
    return named


def source_changed(source: Any) -> str:
    """What a run whose source (``spec.source``) no longer matches its digest says."""
    ref = source.get("configMapRef") if isinstance(source, dict) else None
    what = "spec.source"
    if isinstance(ref, dict):
        what += f" or configmap {ref.get('name')} key {ref.get('key')}"
    return (
        f"the source changed since the run started ({what}): its items are no longer those the "
        "run began with, so nothing more is started from it; create a new PoolRun instead"
    )


def repin(
    pinned: tuple[int, str], generation: int | None, source: Any
) -> tuple[tuple[int, str], bool]:
    """The (generation, digest) a running run is pinned to after seeing ``generation`` with
    ``spec.source`` = ``source``, and whether the source no longer matches the digest.

    Only a spec change moves the generation, so status writes cost no digest.
    """
    if generation == pinned[0]:
        return pinned, False
    return (generation or 0, pinned[1]), source_digest(source) != pinned[1]


def invalid_spec_status(message: str, *, finished: str) -> RawRunStatus:
    """The status that ends a run whose spec does not validate, saying what to fix."""
    return {
        "phase": "Failed",
        "message": message,
        "completionTime": finished,
        "conditions": [
            {
                "type": "Failed",
                "status": "True",
                "reason": "InvalidSpec",
                "message": message,
                "lastTransitionTime": finished,
            }
        ],
    }


def ttl_remaining(completion: float, ttl: float | None, now: float) -> float | None:
    """Seconds until a finished run is deleted (``ttlSecondsAfterFinished``); None to keep it."""
    if ttl is None:
        return None
    return completion + float(ttl) - now
