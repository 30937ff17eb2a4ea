"""The result tracker gives out each of a run's results once, wherever the operator put it.

A run's results land in its status while they fit and in ConfigMaps after; the client reads a
status, then the ConfigMaps it counts, and may find those already further along. These tests
build the layouts with the operator's own placement (:mod:`agentpool.runs.results`) and check
that whatever the order of looks, every record comes out exactly once.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentpool.client.records import Result, ResultTracker, result_of
from agentpool.runs.results import ResultChunks, output_line, place_record, record_line

BUDGET = 600
CHUNK_BYTES = 400


def test_a_record_is_an_output_or_a_failure() -> None:
    assert result_of({"id": "a", "output": {"x": 1}}) == Result("a", output={"x": 1})
    failed = result_of({"id": 7, "failure": {"reason": "HandlerError", "message": "no"}})
    assert (failed.id, failed.ok, failed.failure and failed.failure.reason) == (
        "7",
        False,
        "HandlerError",
    )
    assert result_of({"id": "n", "output": None}).ok


def test_status_records_are_given_once_and_configmaps_only_when_they_grew() -> None:
    tracker = ResultTracker()
    first = {"items": {"a": 1}, "failures": {"b": {"reason": "CallTimeout"}}}
    assert [r.id for r in tracker.from_status(first)] == ["a", "b"]
    second = {**first, "items": {"a": 1, "c": 3}, "resultRefs": [{"name": "r-0", "outputs": 1}]}
    assert [r.id for r in tracker.from_status(second)] == ["c"]
    assert tracker.unread(second) == ["r-0"]
    chunk = {"results.jsonl": '{"id":"d","output":4}\n{"id":"e","output":5}\n'}
    assert [r.id for r in tracker.from_configmap("r-0", chunk)] == ["d", "e"]
    # The ConfigMap was ahead of the status: nothing to read until the status counts more.
    counted = {**second, "resultRefs": [{"name": "r-0", "outputs": 2}]}
    assert tracker.unread(counted) == []
    grown = {
        **second,
        "resultRefs": [{"name": "r-0", "outputs": 3}, {"name": "r-1", "failures": 1}],
    }
    assert tracker.unread(grown) == ["r-0", "r-1"]


def _snapshots(
    records: list[tuple[bool, int]], batches: list[int]
) -> list[tuple[dict[str, Any], dict[str, dict[str, str]]]]:
    """(status, ConfigMaps) after each batch of records, placed as the operator places them."""
    chunks = ResultChunks("run", chunk_bytes=CHUNK_BYTES)
    items: dict[str, Any] = {}
    failures: dict[str, Any] = {}
    configmaps: dict[str, dict[str, str]] = {}
    used = 0
    snapshots = []
    start = 0
    for size in [*batches, len(records)]:
        for number in range(start, min(len(records), start + size)):
            is_output, length = records[number]
            key = f"i{number}"
            value: Any = "x" * length if is_output else {"reason": "HandlerError", "message": "m"}
            if place_record(key, value, is_output=is_output, status_used=used, budget=BUDGET):
                used += len(key) + len(str(value)) + 4
                (items if is_output else failures)[key] = value
            elif is_output:
                chunks.add(output_line(key, f'"{value}"'), is_output=True)
            else:
                chunks.add(record_line(key, failure=value), is_output=False)
        start += size
        configmaps = {**configmaps, **dict(chunks.take_changed())}
        status = {
            "items": dict(items),
            "failures": dict(failures),
            "resultRefs": [dict(ref) for ref in chunks.refs],
        }
        snapshots.append((status, configmaps))
    return snapshots


@settings(max_examples=200, deadline=None)
@given(
    records=st.lists(st.tuples(st.booleans(), st.integers(0, 300)), max_size=40),
    batches=st.lists(st.integers(1, 8), max_size=10),
    lags=st.lists(st.integers(0, 3), max_size=12),
)
def test_every_record_comes_out_exactly_once_whatever_the_order_of_looks(
    records: list[tuple[bool, int]], batches: list[int], lags: list[int]
) -> None:
    """Statuses in order, each followed by reads of the ConfigMaps it counts, which may
    already hold later records (``lags``): the union is every record, none twice, each an
    output or a failure as placed."""
    snapshots = _snapshots(records, batches)
    tracker = ResultTracker()
    given_out: list[Result] = []
    for step, (status, _) in enumerate(snapshots):
        lag = lags[step] if step < len(lags) else 0
        _, configmaps = snapshots[min(len(snapshots) - 1, step + lag)]
        given_out += tracker.from_status(status)
        for name in tracker.unread(status):
            given_out += tracker.from_configmap(name, configmaps[name])
    ids = [result.id for result in given_out]
    assert sorted(ids) == sorted(f"i{n}" for n in range(len(records)))
    assert len(ids) == len(set(ids))
    for result in given_out:
        assert result.ok == records[int(result.id[1:])][0]
