"""Events about the operator's objects, as ``kubectl describe`` and ``kubectl events`` show them.

kopf posts each one in the background, on its own API session and with its own retries, so a
handler never waits on an Event and a refused one costs the handler nothing. This module is the
one place the operator asks for one, so that :mod:`agentpool.io` stays its only edge.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf


def post(obj: Mapping[str, Any], *, type: str, reason: str, message: str) -> None:
    """An Event of ``type`` ("Normal" or "Warning") about ``obj``, the object as the API server
    sent it, posted in the background."""
    kopf.event(obj, type=type, reason=reason, message=message)  # type: ignore[arg-type]
