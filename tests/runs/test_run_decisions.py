"""The pure decisions of a run: naming, routing, outcomes, conditions, placement and resume."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from runfakes import merge_patch, run_config, stored

from agentpool.api import AgentPoolSpec, PoolRunSpec, Routes
from agentpool.api.conditions import set_condition
from agentpool.runs.config import config_from_spec
from agentpool.runs.ending import decide_end
from agentpool.runs.items import ItemKeys, Rejection, route_item
from agentpool.runs.results import (
    SMALL_OUTPUT_BYTES,
    ResultChunks,
    encode,
    output_line,
    place_record,
    record_line,
)
from agentpool.runs.status import RunLedger, flush_due
from agentpool.wire.results import CHUNK_KEY, iter_results


@pytest.mark.parametrize(
    ("value", "index", "field", "seen", "key", "reason"),
    [
        ({"id": "a"}, 0, "id", set(), "a", None),
        ({"id": 7}, 3, "id", set(), "7", None),
        ({"x": 1}, 4, None, set(), "4", None),
        ({"id": "a"}, 5, "id", {"a"}, "a[5]", "DuplicateId"),
        ({"name": "a"}, 2, "id", set(), "[2]", "MissingId"),
        ({"id": None}, 2, "id", set(), "[2]", "MissingId"),
        ({"id": True}, 2, "id", set(), "[2]", "MissingId"),
        ("plain", 1, "id", set(), "[1]", "MissingId"),
    ],
)
def test_items_are_named_by_field_or_index(
    value: Any, index: int, field: str | None, seen: set[str], key: str, reason: str | None
) -> None:
    """An item is named by its id field or index; duplicates and id-less items are rejected."""
    named = ItemKeys(real=set(seen)).name(value, index, id_field=field)
    assert named.key == key
    assert (named.rejection.reason if named.rejection else None) == reason


def test_routes_pick_a_pool_or_reject_with_the_known_routes() -> None:
    """The routing field's value picks the pool; an unknown value names the routes there are."""
    config = run_config("r", routes=Routes(field="role", pools={"a": "pool-a", "1": "one"}))
    assert route_item({"role": "a"}, config) == "pool-a"
    assert route_item({"role": 1}, config) == "one"
    rejected = route_item({"role": "z"}, config)
    assert isinstance(rejected, Rejection)
    assert rejected.reason == "NoRoute"
    assert rejected.message == "item field 'role' is 'z', which no route names (routes: 1, a)"
    assert isinstance(route_item({"other": 1}, config), Rejection)
    assert route_item({"role": "z"}, run_config("r", pool="p")) == "p"


@pytest.mark.parametrize(
    ("kwargs", "phase", "reason", "message"),
    [
        (dict(result="Drained", policy="Fail", total=50, failed=0), "Succeeded", "Drained",
         "50 of 50 items succeeded"),
        (dict(result="Drained", policy="Fail", total=50, failed=5), "Failed", "ItemsFailed",
         "5 of 50 items failed"),
        (dict(result="Drained", policy="Report", total=50, failed=5), "Succeeded", "Drained",
         "45 of 50 items succeeded; 5 of 50 items failed"),
        (dict(result="Deadlocked", policy="Report", total=3, failed=0, not_started=3,
              cause='pool "p" not found'), "Failed", "Deadlocked",
         '3 of 3 items could not start: pool "p" not found'),
        (dict(result="Deadlocked", policy="Fail", total=4, failed=1, not_started=2, cause="c"),
         "Failed", "Deadlocked", "2 of 4 items could not start: c; 1 of 4 items failed"),
        (dict(result=None, policy="Report", total=0, failed=0, source_error="gone"),
         "Failed", "SourceFailed", "gone"),
    ],
)  # fmt: skip
def test_outcomes(kwargs: dict[str, Any], phase: str, reason: str, message: str) -> None:
    """Phase, reason and message follow from result, policy and counts."""
    outcome = decide_end(**kwargs)
    assert (outcome.phase, outcome.reason, outcome.message) == (phase, reason, message)


def test_a_condition_keeps_its_transition_time_until_its_status_changes() -> None:
    """lastTransitionTime moves only when the status does."""
    first = set_condition([], "Complete", False, reason="Running", message="m", now=100.0)
    same = set_condition(first, "Complete", False, reason="Running", message="n", now=200.0)
    moved = set_condition(same, "Complete", True, reason="Drained", message="done", now=300.0)
    assert first[0]["lastTransitionTime"] == same[0]["lastTransitionTime"]
    assert same[0]["message"] == "n"
    assert moved[0]["lastTransitionTime"] != same[0]["lastTransitionTime"]
    assert moved[0]["status"] == "True"


@pytest.mark.parametrize(
    ("now", "last", "due"), [(0.0, None, True), (10.5, 10.0, False), (11.0, 10.0, True)]
)
def test_flush_is_due_once_per_interval(now: float, last: float | None, due: bool) -> None:
    """The first write goes at once, later ones at most once per interval."""
    assert flush_due(now=now, last_write=last, interval=1.0) is due


def test_placement_keeps_small_outputs_in_status_within_budget() -> None:
    """Small records go to status while the budget lasts; outputs over 4 KiB never do."""
    assert place_record("a", "x" * 100, is_output=True, status_used=0)
    assert not place_record("a", "x" * (SMALL_OUTPUT_BYTES + 1), is_output=True, status_used=0)
    assert not place_record("a", "x" * 100, is_output=True, status_used=0, budget=50)
    assert place_record("a", {"reason": "R"}, is_output=False, status_used=0)


def test_chunks_roll_over_and_every_filled_chunk_is_written() -> None:
    """Records fill chunks up to their size; each chunk that changed is handed out for writing."""
    chunks = ResultChunks("run", chunk_bytes=100)
    for n in range(10):
        chunks.add(f'{{"id":"i{n}","output":"{"x" * 20}"}}', is_output=True)
    written = dict(chunks.take_changed())
    assert [ref["name"] for ref in chunks.refs] == [f"run-results-{n}" for n in range(5)]
    assert set(written) == {ref["name"] for ref in chunks.refs}
    assert sum(ref["outputs"] for ref in chunks.refs) == 10
    assert chunks.take_changed() == []
    records = list(
        iter_results({"resultRefs": chunks.refs}, [written[ref["name"]] for ref in chunks.refs])
    )
    assert [record["id"] for record in records] == [f"i{n}" for n in range(10)]


def test_a_ledger_restores_records_counts_and_in_flight_items() -> None:
    """A written status restores what is recorded (never run again) and what was in flight."""
    status = {
        "items": {"a": 1},
        "failures": {"b": {"reason": "R", "message": "m", "attempts": 2}},
        "inFlight": {"c": 1, "a": 1},
        "retries": 3,
        "total": 9,
        "resultRefs": [{"name": "r-results-0", "outputs": 1, "failures": 0}],
    }
    configmaps = {"r-results-0": {CHUNK_KEY: '{"id":"d","output":4}\n'}}
    ledger = RunLedger.restore("r", replayable=True, status=stored(status), configmaps=configmaps)
    assert ledger.recorded == {"a", "b", "d"}
    assert (ledger.succeeded, ledger.failed, ledger.attempts.retries, ledger.seen) == (2, 1, 3, 9)
    assert ledger.attempts.resumed == {"c": 1}
    # New results continue the last chunk rather than overwrite it.
    ledger.record_output("e", "y" * 5000)
    [(name, data)] = ledger.take_flush({}).configmaps
    assert name == "r-results-0"
    assert [r["id"] for r in iter_results({"resultRefs": [{"name": name}]}, [data])] == ["d", "e"]


def test_flush_patches_send_only_changes_and_remove_finished_in_flight_items() -> None:
    """Each patch carries new records only, and sets finished in-flight ids to null."""
    ledger = RunLedger(run="r", replayable=True)
    ledger.start("a", attempt=1)
    ledger.start("b", attempt=1)
    first = ledger.take_flush({}).patch
    assert first["inFlight"] == {"a": 1, "b": 1}
    ledger.record_output("a", "out")
    second = ledger.take_flush({}).patch
    assert second["inFlight"] == {"a": None}
    assert second["items"] == {"a": "out"}
    third = ledger.take_flush({}).patch
    assert "items" not in third
    assert "inFlight" not in third


def run_spec(raw: dict[str, Any]) -> PoolRunSpec:
    """A PoolRun spec as the daemon validates it, with a source added: the tests here are about
    everything else."""
    return PoolRunSpec.model_validate({"source": {"items": []}, **raw})


def pool_spec(checkout: int, call: int) -> AgentPoolSpec:
    return AgentPoolSpec(checkout_timeout_seconds=checkout, call_timeout_seconds=call)


def test_config_from_spec_resolves_defaults_and_overrides() -> None:
    """The run's own timeouts override the pool's; the rest take the API's defaults."""
    config = config_from_spec(
        "r",
        run_spec({"poolRef": {"name": "p"}, "callTimeoutSeconds": 5, "cap": 3}),
        pools={"p": pool_spec(checkout=12, call=99)},
    )
    spec = config.spec
    assert (config.pool, spec.cap, spec.mode, spec.failures) == ("p", 3, "Call", "Fail")
    assert (config.checkout_timeout("p"), config.call_timeout("p")) == (12, 5)
    assert spec.backoff_seconds == 1.0
    assert config.effective_rerun_limit(replayable=True) == 3
    assert config.effective_rerun_limit(replayable=False) is None
    routed = config_from_spec(
        "r", run_spec({"routes": {"field": "f", "pools": {"x": "px"}}}), pools={}
    )
    assert routed.routes == Routes(field="f", pools={"x": "px"})
    assert (routed.checkout_timeout("px"), routed.call_timeout("px")) == (30, 300)
    with pytest.raises(ValueError, match="needs poolRef or routes"):
        config_from_spec("r", run_spec({}), pools={})


def test_a_routed_run_follows_each_pools_timeouts_unless_it_sets_its_own() -> None:
    """Items routed to two pools wait and run as long as their own pool allows; a run-wide
    timeout overrides both."""
    spec = {"routes": {"field": "role", "pools": {"a": "fast", "b": "slow"}}}
    pools = {"fast": pool_spec(checkout=2, call=10), "slow": pool_spec(checkout=60, call=900)}
    routed = config_from_spec("r", run_spec(spec), pools=pools)
    assert [routed.checkout_timeout(p) for p in ("fast", "slow")] == [2, 60]
    assert [routed.call_timeout(p) for p in ("fast", "slow")] == [10, 900]
    capped = config_from_spec("r", run_spec({**spec, "callTimeoutSeconds": 5}), pools=pools)
    assert [capped.call_timeout(p) for p in ("fast", "slow")] == [5, 5]
    assert [capped.checkout_timeout(p) for p in ("fast", "slow")] == [2, 60]


@pytest.mark.parametrize(
    ("key", "output"),
    [("a", {"n": 1, "text": "é ☃"}), ('i"d', [1, None, True]), ("0", "plain"), ("x", None)],
)
def test_an_output_encoded_once_reads_back_as_the_same_record(key: str, output: Any) -> None:
    """The result ConfigMap and the journal take an output encoded once; the line is the same
    record, byte for byte, as one encoded from scratch, and reads back as it."""
    line = output_line(key, encode(output))
    assert line == record_line(key, output=output)
    assert json.loads(line) == {"id": key, "output": output}


#: Any JSON value, nulls included at every depth, as an agent may answer it.
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=10,
)


def holds_null(value: Any) -> bool:
    if isinstance(value, dict):
        return any(holds_null(v) for v in value.values())
    if isinstance(value, list):
        return any(holds_null(v) for v in value)
    return value is None


@given(outputs=st.lists(JSON, min_size=1, max_size=5))
def test_outputs_with_null_values_read_back_exactly_as_the_agents_answered(
    outputs: list[Any],
) -> None:
    """Status is written as a JSON merge patch, where null deletes: an output such as
    {"answer": 1, "lease": null}, or null itself, still reads back exactly as answered, and no
    output in status holds a null that a merge patch could drop."""
    ledger = RunLedger(run="r", replayable=True)
    status: dict[str, Any] = {"items": {"earlier": {"lease": "kept"}}}
    configmaps: dict[str, dict[str, str]] = {}
    for n, output in enumerate(outputs):
        ledger.record_output(f"i{n}", output)
        flush = ledger.take_flush({})
        configmaps.update(flush.configmaps)
        assert not holds_null(flush.patch.get("items", {}))
        status = merge_patch(status, flush.patch)
    datas = [configmaps[ref["name"]] for ref in status.get("resultRefs", [])]
    read = {record["id"]: record.get("output") for record in iter_results(status, datas)}
    assert read == {"earlier": {"lease": "kept"}} | {f"i{n}": o for n, o in enumerate(outputs)}
