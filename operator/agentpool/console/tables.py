"""Prints a ``meta.k8s.io/v1`` Table the way ``kubectl get`` does.

The demo shows the final ``kubectl get poolruns`` line on machines without kubectl: it asks the
API server for Table output (the printer columns of the CRD) and prints it here.
"""

from __future__ import annotations

from typing import Any, TypedDict

TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def _cell(value: Any) -> str:
    if value is None:
        return "<none>"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


class RawTableColumn(TypedDict, total=False):
    """A ``meta.k8s.io/v1`` TableColumnDefinition: a column's header and whether it is wide."""

    name: str
    type: str
    format: str
    description: str
    priority: int


class RawTableRow(TypedDict, total=False):
    """A ``meta.k8s.io/v1`` TableRow: one object's cells, in the columns' order."""

    cells: list[Any]
    object: Any


class RawTable(TypedDict, total=False):
    """A ``meta.k8s.io/v1`` Table, as the API server answers a request for one."""

    apiVersion: str
    kind: str
    columnDefinitions: list[RawTableColumn]
    rows: list[RawTableRow]


def format_table(table: RawTable) -> str:
    """Columns of priority 0, upper-cased headers, each column as wide as its widest cell."""
    columns = [
        (index, column)
        for index, column in enumerate(table.get("columnDefinitions") or [])
        if int(column.get("priority", 0)) == 0
    ]
    headers = [column["name"].upper() for _, column in columns]
    rows = [[_cell(row["cells"][index]) for index, _ in columns] for row in table.get("rows") or []]
    widths = [max(len(text) for text in column) for column in zip(headers, *rows, strict=True)]
    lines = [
        "   ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)).rstrip()
        for line in [headers, *rows]
    ]
    return "\n".join(lines)
