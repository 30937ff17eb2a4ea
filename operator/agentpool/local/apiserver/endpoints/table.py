"""Table output (``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``) for ``kubectl get``.

Custom resources get a Name column, then their CRD's ``additionalPrinterColumns`` evaluated with
the CRD JSONPath subset (or a single Age column when none are declared); pods get the columns a
real API server prints (NAME READY STATUS RESTARTS AGE, plus IP and NODE for ``-o wide``), and so
do events (LAST SEEN TYPE REASON OBJECT MESSAGE, the object as kind/name, plus SUBOBJECT, SOURCE,
FIRST SEEN, COUNT and NAME for ``-o wide``); other built-ins get Name and a column or two. Dates
become human durations because kubectl prints cells verbatim. ``handlers`` and ``watch`` call
``build_table``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from agentpool.api.columns import PrinterColumn
from agentpool.local.apiserver.errors import bad_request
from agentpool.local.apiserver.resources import ResourceType

Obj = dict[str, Any]

_NAME = PrinterColumn(
    "Name",
    "string",
    ".metadata.name",
    format="name",
    description="Name must be unique within a namespace.",
)
_AGE = PrinterColumn("Age", "date", ".metadata.creationTimestamp")
_STEP_RE = re.compile(
    r"\.?([A-Za-z0-9_\-/]+)|\[(\d+|\*)\]|\[\?\(@\.([\w.\-/]+)\s*==\s*['\"]([^'\"]*)['\"]\)\]"
)


def human_duration(seconds: float) -> str:
    """kubectl's HumanDuration, so AGE reads as it does against a cluster."""
    if seconds < -1:
        return "<invalid>"
    s = max(int(seconds), 0)
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    h = m // 60
    if h < 3:
        return f"{m}m"
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    d = h // 24
    if d < 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    if d < 365 * 2:
        return f"{d}d"
    y = d // 365
    if y < 8:
        return f"{y}y{d % 365}d" if d % 365 else f"{y}y"
    return f"{y}y"


def age(timestamp: Any, now: datetime) -> str:
    if not isinstance(timestamp, str):
        return "<unknown>"
    try:
        then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "<invalid>"
    return human_duration((now - then).total_seconds())


def jsonpath(obj: Any, path: str) -> list[Any]:
    """Evaluate the JSONPath subset printer columns use: ``.a.b``, ``[0]``, ``[*]``, filters."""
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    path = path.removeprefix("$")
    values = [obj]
    position = 0
    while position < len(path):
        step = _STEP_RE.match(path, position)
        if not step:
            return []
        position = step.end()
        field, index, filter_field, filter_value = step.groups()
        found: list[Any] = []
        for value in values:
            if field is not None and isinstance(value, dict) and field in value:
                found.append(value[field])
            elif index == "*" and isinstance(value, list):
                found.extend(value)
            elif index is not None and index != "*" and isinstance(value, list):
                if int(index) < len(value):
                    found.append(value[int(index)])
            elif filter_field is not None and isinstance(value, list):
                for item in value:
                    hit = jsonpath(item, "." + filter_field)
                    if hit and str(hit[0]) == filter_value:
                        found.append(item)
        values = found
    return values


def _cell(column: PrinterColumn, obj: Obj, now: datetime) -> Any:
    found = jsonpath(obj, column.json_path)
    if not found or found[0] is None:
        return None
    value = found[0]
    if column.type == "date":
        return age(value, now)
    if column.type == "integer":
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if column.type == "number":
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return float(value) if ok else None
    if column.type == "boolean":
        return value if isinstance(value, bool) else None
    if isinstance(value, dict | list):
        import json

        return json.dumps(value, separators=(",", ":"))
    return str(value).lower() if isinstance(value, bool) else str(value)


def _pod_status(pod: Obj) -> str:
    if pod["metadata"].get("deletionTimestamp"):
        return "Terminating"
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        if state.get("waiting", {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif state.get("terminated", {}).get("reason"):
            reason = state["terminated"]["reason"]
    return str(reason)


def _pod_cells(pod: Obj, now: datetime) -> list[Any]:
    status = pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or [])
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount", 0)) for c in statuses)
    # As kube-apiserver prints it: a string, with how long ago the last restart was.
    restarted = [
        c["lastState"]["terminated"]["finishedAt"]
        for c in statuses
        if ((c.get("lastState") or {}).get("terminated") or {}).get("finishedAt")
    ]
    shown = (
        f"{restarts} ({age(max(restarted), now)} ago)" if restarts and restarted else str(restarts)
    )
    return [
        pod["metadata"]["name"],
        f"{ready}/{total}",
        _pod_status(pod),
        shown,
        age(pod["metadata"].get("creationTimestamp"), now),
        status.get("podIP") or "<none>",
        (pod.get("spec") or {}).get("nodeName") or "<none>",
        "<none>",
        "<none>",
    ]


_POD_COLUMNS = (
    _NAME,
    PrinterColumn("Ready", "string", "", description="The aggregate readiness state of this pod."),
    PrinterColumn("Status", "string", "", description="The aggregate status of the pod."),
    PrinterColumn(
        "Restarts", "string", "", description="The number of times the containers restarted."
    ),
    PrinterColumn("Age", "string", "", description="CreationTimestamp is a timestamp."),
    PrinterColumn("IP", "string", "", description="IP address allocated to the pod.", priority=1),
    PrinterColumn("Node", "string", "", description="The node the pod is bound to.", priority=1),
    PrinterColumn("Nominated Node", "string", "", description="Nominated node.", priority=1),
    PrinterColumn("Readiness Gates", "string", "", description="Readiness gates.", priority=1),
)


def _event_cells(event: Obj, now: datetime) -> list[Any]:
    """An Event's cells as kube-apiserver's event printer makes them: times fall back on the
    new API's eventTime and series, a count of 0 (a singleton in the new API) shows as 1, and
    the object is kind/name in lower case, so a pool and a run of one name tell apart."""
    first = (
        age(event["firstTimestamp"], now)
        if event.get("firstTimestamp")
        else age(event.get("eventTime"), now)
    )
    last = age(event["lastTimestamp"], now) if event.get("lastTimestamp") else first
    count = event.get("count") or 0
    series = event.get("series")
    if series:
        last = age(series.get("lastObservedTime"), now)
        count = series.get("count") or 0
    elif not count:
        count = 1
    involved = event.get("involvedObject") or {}
    kind = str(involved.get("kind") or "").lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    source = event.get("source") or {}
    component = source.get("component") or event.get("reportingComponent") or ""
    instance = source.get("host") or event.get("reportingInstance") or ""
    return [
        last,
        event.get("type") or "",
        event.get("reason") or "",
        target,
        involved.get("fieldPath") or "",
        f"{component}, {instance}" if instance else component,
        str(event.get("message") or "").strip(),
        first,
        int(count),
        event["metadata"]["name"],
    ]


_EVENT_COLUMNS = (
    PrinterColumn(
        "Last Seen",
        "string",
        "",
        description="The time at which the most recent occurrence of this event was recorded.",
    ),
    PrinterColumn("Type", "string", "", description="Type of this event (Normal, Warning)."),
    PrinterColumn(
        "Reason",
        "string",
        "",
        description="A short, machine understandable string that gives the reason for the "
        "transition into the object's current status.",
    ),
    PrinterColumn("Object", "string", "", description="The object that this event is about."),
    PrinterColumn(
        "Subobject",
        "string",
        "",
        description="The piece of the object the event is about, as a field path.",
        priority=1,
    ),
    PrinterColumn(
        "Source", "string", "", description="The component reporting this event.", priority=1
    ),
    PrinterColumn(
        "Message",
        "string",
        "",
        description="A human-readable description of the status of this operation.",
    ),
    PrinterColumn(
        "First Seen",
        "string",
        "",
        description="The time at which the event was first recorded.",
        priority=1,
    ),
    PrinterColumn(
        "Count",
        "string",
        "",
        description="The number of times this event has occurred.",
        priority=1,
    ),
    PrinterColumn(
        "Name",
        "string",
        "",
        format="name",
        description="Name must be unique within a namespace.",
        priority=1,
    ),
)

_BUILTIN_COLUMNS: dict[tuple[str, str], tuple[PrinterColumn, ...]] = {
    ("", "namespaces"): (_NAME, PrinterColumn("Status", "string", ".status.phase"), _AGE),
    ("", "configmaps"): (_NAME, PrinterColumn("Data", "integer", ""), _AGE),
    ("", "secrets"): (
        _NAME,
        PrinterColumn("Type", "string", ".type"),
        PrinterColumn("Data", "integer", ""),
        _AGE,
    ),
    ("", "services"): (
        _NAME,
        PrinterColumn("Type", "string", ".spec.type"),
        PrinterColumn("Cluster-IP", "string", ".spec.clusterIP"),
        _AGE,
    ),
    ("coordination.k8s.io", "leases"): (
        _NAME,
        PrinterColumn("Holder", "string", ".spec.holderIdentity"),
        _AGE,
    ),
    ("", "events"): _EVENT_COLUMNS,
}


def columns_of(rt: ResourceType) -> tuple[PrinterColumn, ...]:
    if rt.key == ("", "pods"):
        return _POD_COLUMNS
    if rt.custom:
        return (_NAME, *rt.columns) if rt.columns else (_NAME, _AGE)
    return _BUILTIN_COLUMNS.get(rt.key, (_NAME, _AGE))


def _cells(
    rt: ResourceType, columns: Iterable[PrinterColumn], obj: Obj, now: datetime
) -> list[Any]:
    if rt.key == ("", "pods"):
        return _pod_cells(obj, now)
    if rt.key == ("", "events"):
        return _event_cells(obj, now)
    cells: list[Any] = []
    for column in columns:
        if column.name == "Data" and not column.json_path:
            cells.append(len(obj.get("data") or {}) + len(obj.get("binaryData") or {}))
        else:
            cells.append(_cell(column, obj, now))
    return cells


def row_object(obj: Obj, include: str) -> Obj | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj["metadata"],
    }


def check_include(include: str | None) -> str:
    include = include or "Metadata"
    if include not in ("None", "Metadata", "Object"):
        raise bad_request(f'includeObject: Unsupported value: "{include}"')
    return include


def _describe(column: PrinterColumn) -> str:
    if column.json_path:
        return f"Custom resource definition column (in JSONPath format): {column.json_path}"
    return column.name


def build_table(
    rt: ResourceType,
    objects: Iterable[Obj],
    *,
    resource_version: str,
    include: str = "Metadata",
    with_columns: bool = True,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Obj:
    """A ``meta.k8s.io/v1`` Table of ``objects`` with ``rt``'s columns."""
    columns = columns_of(rt)
    moment = now()
    rows = []
    for obj in objects:
        row: Obj = {"cells": _cells(rt, columns, obj, moment)}
        # A real server sends the key even with includeObject=None, as null.
        row["object"] = row_object(obj, include)
        rows.append(row)
    definitions = [
        {
            "name": c.name,
            "type": c.type,
            "format": c.format,
            "description": c.description or _describe(c),
            "priority": c.priority,
        }
        for c in columns
    ]
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": definitions if with_columns else None,
        "rows": rows,
    }
