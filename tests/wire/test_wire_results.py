"""A run's results read back as the operator's ``agentpool results`` and the Python client read
them: every record once, from status first, then from the ConfigMaps in order."""

from __future__ import annotations

import pytest

from agentpool.wire.results import CHUNK_KEY, iter_results


def test_iter_results_reads_status_then_configmaps_once_each() -> None:
    """Results come from status and ConfigMaps, each id once; a missing ConfigMap is an error."""
    status = {
        "items": {"a": 1},
        "failures": {"b": {"reason": "HandlerError", "message": "m", "attempts": 1}},
        "resultRefs": [{"name": "r-results-0", "outputs": 2, "failures": 0}],
    }
    data = {CHUNK_KEY: '{"id":"c","output":3}\n{"id":"a","output":9}\n'}
    records = list(iter_results(status, [data]))
    assert records == [
        {"id": "a", "output": 1},
        {"id": "b", "failure": {"reason": "HandlerError", "message": "m", "attempts": 1}},
        {"id": "c", "output": 3},
    ]
    with pytest.raises(ValueError, match="r-results-0"):
        list(iter_results(status, []))
