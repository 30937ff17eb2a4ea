"""A run's start: what its daemon opened before the engine runs is closed if the start fails."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from agentpool.api import PoolRunSpec
from agentpool.handlers import runs
from agentpool.handlers.runtime import Runtime


class RecordingSource:
    """A source that notes whether it was closed."""

    replayable = True

    def __init__(self) -> None:
        self.closed = False

    async def close(self) -> None:
        self.closed = True


class BrokenKube:
    """An API server that answers every pool read with an error other than NotFound."""

    async def get_custom(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        raise RuntimeError(f"GET {plural}/{name}: connection refused")


async def test_a_start_whose_pool_read_fails_closes_the_source_it_opened(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = RecordingSource()

    async def open_source(*args: Any, **kwargs: Any) -> tuple[RecordingSource, str]:
        return source, "digest"

    monkeypatch.setattr(runs, "open_source", open_source)
    runtime = cast(Runtime, SimpleNamespace(kube=BrokenKube()))
    body = {"metadata": {"namespace": "ns", "name": "r", "uid": "u"}}
    spec = PoolRunSpec.model_validate({"poolRef": {"name": "p"}, "source": {"items": [1]}})
    with pytest.raises(RuntimeError, match="connection refused"):
        await runs.build_engine(
            runtime,
            cast(Any, body),
            ("ns", "r"),
            spec,
            raw_source={"items": [1]},
            status={"sourceDigest": "digest"},
        )
    assert source.closed, "the source opened for a run that failed to start was left open"
