"""The manual's reference pages say what the code does: tables, metrics, reason words.

The configuration tables (docs/reference/configuration.md) are generated from the models, so a
changed field fails here until the page is regenerated; the metrics table
(docs/operations/monitoring.md) and the tables of condition reasons (docs/reference/status.md)
are written by hand, so these tests check them against the metrics registry and the reason
constants, and that each reason has its section in docs/troubleshooting.md.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from agentpool import metrics
from agentpool.api import AgentLeaseSpec, AgentPoolSpec, PoolRunSpec, PoolState
from agentpool.api.docs import BEGIN, END, field_rows, main, render_tables, replace_block
from agentpool.api.reasons import GatewayReason, Reason, RetireReason

DOCS = Path(__file__).resolve().parents[2] / "docs"
CONFIGURATION = DOCS / "reference" / "configuration.md"
MONITORING = DOCS / "operations" / "monitoring.md"
STATUS = DOCS / "reference" / "status.md"
TROUBLESHOOTING = DOCS / "troubleshooting.md"


def _section(path: Path, title: str) -> str:
    text = path.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def _explained_reasons() -> set[str]:
    """The words in the first column of the status page's tables of reasons and states (its
    tables of status fields aside)."""
    explained: set[str] = set()
    for table in re.split(r"\n\s*\n", STATUS.read_text()):
        if table.startswith(("| reason |", "| state |")):
            explained |= set(re.findall(r"^\| `(\w+)` \|", table, re.MULTILINE))
    return explained


def test_config_tables_match_the_models() -> None:
    """The configuration reference's tables are exactly what the models generate today."""
    text = CONFIGURATION.read_text()
    assert replace_block(text, render_tables()) == text, (
        "docs/reference/configuration.md's tables differ from the models in agentpool.api; "
        "regenerate them with `python -m agentpool.api.docs --write "
        "docs/reference/configuration.md`"
    )


@pytest.mark.parametrize("model", [AgentPoolSpec, PoolRunSpec, AgentLeaseSpec])
def test_tables_list_every_spec_field_with_its_description(model: type) -> None:
    """Each top-level spec field has a row under its wire name, with a default and a description."""
    rows = {row.path: row for row in field_rows(model)}
    for name, field in model.model_fields.items():
        row = rows[field.alias or name]
        assert row.description, f"{row.path} has no description"
        assert row.default


def test_tables_show_types_bounds_and_defaults() -> None:
    """A row carries what a user needs to write the field: enum values, bounds and default."""
    tables = render_tables()
    assert "| `strategy` | `LIFO` or `FIFO` | `LIFO` |" in tables
    assert "| `port` | integer, ≥ 1, ≤ 65535 | `8080` |" in tables
    assert "| `source` | object | required |" in tables
    assert "| `readinessProbe.httpGet.path` | string | `/healthz` |" in tables


def test_check_fails_on_a_stale_file_and_write_fixes_it(tmp_path: Path) -> None:
    """``--check`` exits 1 on a file whose block is stale, ``--write`` refreshes it, and the text
    around the markers is kept."""
    target = tmp_path / "README.md"
    target.write_text(f"before\n{BEGIN}\nold table\n{END}\nafter\n")
    assert main(["--check", str(target)]) == 1
    assert main(["--write", str(target)]) == 0
    assert main(["--check", str(target)]) == 0
    text = target.read_text()
    assert text.startswith(f"before\n{BEGIN}\n### AgentPool")
    assert text.endswith(f"{END}\nafter\n")


def test_replace_block_refuses_a_file_without_markers() -> None:
    """A file without the markers is an error naming them, not a silent append."""
    with pytest.raises(ValueError, match="config-tables"):
        replace_block("no markers here\n", "tables")


def test_monitoring_lists_every_metric_the_operator_exports() -> None:
    """Every metric family in the operator's registry has a row in the monitoring page's metrics
    table, and the table names no metric that does not exist."""
    # prometheus_client drops the _total suffix from a counter's family name.
    exported = {
        f"{family.name}_total" if family.type == "counter" else family.name
        for family in metrics.REGISTRY.collect()
    }
    listed = set(
        re.findall(r"^\| `(agentpool_\w+)` \|", _section(MONITORING, "Metrics"), re.MULTILINE)
    )
    assert listed == exported


def test_troubleshooting_names_only_reasons_the_code_uses() -> None:
    """Each reason or pool state the status page's tables explain is a word the operator writes,
    and the pool's Degraded reasons, its states and the item failure reasons are all
    explained."""
    states = set(get_args(PoolState))
    known = {str(r) for r in Reason} | {str(r) for r in RetireReason} | states
    explained = _explained_reasons()
    assert explained <= known, f"the manual explains reasons nobody writes: {explained - known}"
    expected = {
        Reason.IMAGE_PULL_BACK_OFF,
        Reason.CRASH_LOOP_BACK_OFF,
        Reason.READINESS_FAILING,
        Reason.UNSCHEDULABLE,
        Reason.POD_FAILED,
        Reason.NO_LOCAL_COMMAND,
        Reason.DEADLOCKED,
        Reason.ITEMS_FAILED,
        Reason.HANDLER_ERROR,
        Reason.CALL_TIMEOUT,
        Reason.AGENT_LOST,
        Reason.DUPLICATE_ID,
        Reason.MISSING_ID,
        Reason.NO_ROUTE,
    }
    assert {str(r) for r in expected} | states <= explained


def test_every_reason_has_its_troubleshooting_section() -> None:
    """Each reason the status page's tables explain (the pool's states aside) has a `## Reason`
    section in docs/troubleshooting.md, where a reader of a condition lands, and every section
    there is a word the operator writes or the operator being down."""
    headings = set(re.findall(r"^## (\w+)$", TROUBLESHOOTING.read_text(), re.MULTILINE))
    reasons = _explained_reasons() - set(get_args(PoolState))
    assert reasons <= headings, f"no troubleshooting section for {sorted(reasons - headings)}"
    known = {str(r) for r in (*Reason, *RetireReason, *GatewayReason)} | {"OperatorDown"}
    assert headings <= known, f"troubleshooting sections for no reason: {headings - known}"
