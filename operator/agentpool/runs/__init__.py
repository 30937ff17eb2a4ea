"""The PoolRun engine: sources, naming and routing, dispatch, results and batched status.

Nothing here talks to Kubernetes or kopf: the PoolRun daemon builds a :class:`RunEngine` with a
:class:`RunConfig`, an item source, and the broker, agent client and status sink it adapts to the
protocols in :mod:`agentpool.runs.contracts`, then awaits :meth:`RunEngine.run`. Where its
results go is :mod:`agentpool.runs.results`; reading them back, :mod:`agentpool.wire.results`.
"""

from agentpool.runs.config import RunConfig, config_from_spec
from agentpool.runs.contracts import Clock, Dispatcher, Journal, StatusSink, SystemClock
from agentpool.runs.ending import RunEnd
from agentpool.runs.engine import RunEngine
from agentpool.runs.sources import (
    ItemSource,
    SourceError,
    configmap_source,
    inline_source,
)

__all__ = [
    "Clock",
    "Dispatcher",
    "ItemSource",
    "Journal",
    "RunConfig",
    "RunEnd",
    "RunEngine",
    "SourceError",
    "StatusSink",
    "SystemClock",
    "config_from_spec",
    "configmap_source",
    "inline_source",
]
