"""Table-driven tests of the API server's pure pieces: human durations, JSONPath, selectors,
the patch engine, the scale view and the protobuf reader (kubectl's objects, RBAC objects and
reviews)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from agentpool.local.apiserver.endpoints import protobuf
from agentpool.local.apiserver.endpoints.table import build_table, human_duration, jsonpath
from agentpool.local.apiserver.errors import ApiError
from agentpool.local.apiserver.registry import patch
from agentpool.local.apiserver.registry.scale import apply_scale, scale_of
from agentpool.local.apiserver.resources import ResourceType, ScaleSpec
from agentpool.local.apiserver.storage.selectors import field_selector, label_selector

PODS = ResourceType("", "v1", "pods", "Pod", "pod", namespaced=True)


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (-2, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (119, "119s"),
        (120, "2m"),
        (125, "2m5s"),
        (600, "10m"),
        (3 * 3600 - 1, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 60, "3h1m"),
        (8 * 3600, "8h"),
        (47 * 3600, "47h"),
        (48 * 3600, "2d"),
        (50 * 3600, "2d2h"),
        (8 * 86400, "8d"),
        (800 * 86400, "2y70d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_human_duration(seconds: float, shown: str) -> None:
    """Ages read exactly as kubectl's HumanDuration prints them."""
    assert human_duration(seconds) == shown


@pytest.mark.parametrize(
    ("path", "found"),
    [
        (".spec.size", [3]),
        ("{.spec.size}", [3]),
        (".spec.missing", []),
        (".status.conditions[0].type", ["Ready"]),
        (".status.conditions[*].type", ["Ready", "Degraded"]),
        ('.status.conditions[?(@.type=="Degraded")].reason', ["Slow"]),
    ],
)
def test_jsonpath(path: str, found: list[Any]) -> None:
    """Printer-column JSONPath finds fields, indexes, wildcards and filters."""
    obj = {
        "spec": {"size": 3},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "Degraded", "reason": "Slow"},
            ]
        },
    }
    assert jsonpath(obj, path) == found


@pytest.mark.parametrize("text", ["a in b", "a in (x", "=x", "a notin"])
def test_bad_label_selectors_are_400(text: str) -> None:
    """A selector the grammar does not allow is a 400 BadRequest."""
    with pytest.raises(ApiError) as caught:
        label_selector(text)
    assert caught.value.code == 400


def test_field_selector_rejects_unknown_fields() -> None:
    """Only supported fields can be selected on, as on a real server."""
    with pytest.raises(ApiError) as caught:
        field_selector("spec.image=x", PODS)
    assert caught.value.message == "field label not supported: spec.image"
    match = field_selector("status.phase!=Running", PODS)
    assert match is not None
    assert match({"metadata": {"name": "p"}, "status": {"phase": "Pending"}})


def test_merge_patch() -> None:
    """RFC 7386: nested merge, null deletes, lists replace, the input is untouched."""
    target = {"a": {"b": 1, "c": 2}, "l": [1, 2]}
    result = patch.merge_patch(target, {"a": {"b": None, "d": 3}, "l": [3]})
    assert result == {"a": {"c": 2, "d": 3}, "l": [3]}
    assert target == {"a": {"b": 1, "c": 2}, "l": [1, 2]}


@pytest.mark.parametrize(
    ("ops", "expected"),
    [
        ([{"op": "add", "path": "/l/-", "value": 3}], {"a": 1, "l": [1, 2, 3]}),
        ([{"op": "add", "path": "/l/0", "value": 0}], {"a": 1, "l": [0, 1, 2]}),
        ([{"op": "remove", "path": "/a"}], {"l": [1, 2]}),
        ([{"op": "replace", "path": "/a", "value": 5}], {"a": 5, "l": [1, 2]}),
        ([{"op": "move", "from": "/a", "path": "/b"}], {"b": 1, "l": [1, 2]}),
        ([{"op": "copy", "from": "/a", "path": "/b"}], {"a": 1, "b": 1, "l": [1, 2]}),
        ([{"op": "test", "path": "/a", "value": 1}], {"a": 1, "l": [1, 2]}),
    ],
)
def test_json_patch(ops: list[dict[str, Any]], expected: dict[str, Any]) -> None:
    """RFC 6902 operations apply to a copy."""
    assert patch.json_patch({"a": 1, "l": [1, 2]}, ops) == expected


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "test", "path": "/a", "value": 2}],
        [{"op": "remove", "path": "/zz"}],
        [{"op": "replace", "path": "/zz", "value": 1}],
    ],
)
def test_json_patch_failures_are_422(ops: list[dict[str, Any]]) -> None:
    """A failed test, or a path that is not there, is a 422."""
    with pytest.raises(ApiError) as caught:
        patch.json_patch({"a": 1}, ops)
    assert caught.value.code == 422


def test_strategic_merge_keys_and_directives() -> None:
    """Named lists merge by key; $patch delete/replace, $retainKeys and primitive deletes work."""
    pod = {
        "metadata": {"finalizers": ["a", "b"]},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "i:1",
                    "env": [{"name": "X", "value": "1"}],
                    "ports": [{"containerPort": 80, "name": "http"}],
                },
                {"name": "side", "image": "s:1"},
            ],
            "volumes": [{"name": "v", "emptyDir": {}}],
        },
    }
    result = patch.strategic_merge(
        pod,
        {
            "metadata": {"finalizers": ["c"], "$deleteFromPrimitiveList/finalizers": ["a"]},
            "spec": {
                "$setElementOrder/containers": [{"name": "c"}, {"name": "side"}],
                "containers": [
                    {
                        "name": "c",
                        "env": [{"name": "Y", "value": "2"}],
                        "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    },
                    {"name": "side", "$patch": "delete"},
                ],
                "volumes": [{"name": "w", "emptyDir": {}}],
            },
        },
    )
    containers = result["spec"]["containers"]
    assert [c["name"] for c in containers] == ["c"]
    assert [e["name"] for e in containers[0]["env"]] == ["X", "Y"]
    assert containers[0]["ports"] == [{"containerPort": 80, "name": "http", "protocol": "TCP"}]
    assert [v["name"] for v in result["spec"]["volumes"]] == ["v", "w"]
    assert result["metadata"]["finalizers"] == ["b", "c"]
    service = {"spec": {"ports": [{"port": 80, "name": "a"}], "type": "ClusterIP"}}
    merged = patch.strategic_merge(service, {"spec": {"ports": [{"port": 81, "name": "b"}]}})
    assert [p["port"] for p in merged["spec"]["ports"]] == [80, 81]
    replaced = patch.strategic_merge(service, {"spec": {"$patch": "replace", "type": "NodePort"}})
    assert replaced["spec"] == {"type": "NodePort"}
    retained = patch.strategic_merge(
        {"spec": {"a": 1, "b": 2}}, {"spec": {"$retainKeys": ["b"], "b": 3}}
    )
    assert retained["spec"] == {"b": 3}


def test_patch_types_for_custom_resources() -> None:
    """Strategic merge is refused for custom resources with the real server's message."""
    with pytest.raises(ApiError) as caught:
        patch.apply_patch({}, {}, patch.STRATEGIC, custom=True)
    assert caught.value.code == 415
    assert caught.value.message.endswith(
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )


def test_scale_view_round_trip() -> None:
    """Scale reads specReplicasPath/statusReplicasPath and writes replicas back."""
    rt = ResourceType(
        "g",
        "v1",
        "things",
        "Thing",
        "thing",
        namespaced=True,
        scale=ScaleSpec(".spec.size", ".status.size", ".status.selector"),
    )
    obj = {
        "metadata": {"name": "t", "resourceVersion": "7"},
        "spec": {"size": 2},
        "status": {"size": 1, "selector": "a=b"},
    }
    scale = scale_of(rt, obj)
    assert scale["spec"] == {"replicas": 2}
    assert scale["status"] == {"replicas": 1, "selector": "a=b"}
    assert scale["metadata"]["resourceVersion"] == "7"
    written = apply_scale(rt, obj, {"spec": {"replicas": 5}})
    assert written["spec"] == {"size": 5}
    assert obj["spec"] == {"size": 2}
    with pytest.raises(ApiError):
        apply_scale(rt, obj, {"spec": {"replicas": -1}})


def test_protobuf_config_map() -> None:
    """The protobuf kubectl create configmap sends decodes to the JSON object it describes."""
    body = (
        b'k8s\x00\n\x0f\n\x02v1\x12\tConfigMap\x12\x1c\n\x12\n\x02cm\x12\x00\x1a\x00"\x00*'
        b'\x002\x008\x00B\x00\x12\x06\n\x01a\x12\x011\x1a\x00"\x00'
    )
    assert protobuf.decode(body) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cm"},
        "data": {"a": "1"},
    }
    with pytest.raises(ApiError):
        protobuf.decode(b"not protobuf")


def _field(number: int, value: bytes) -> bytes:
    """One length-delimited protobuf field (all the reader's test messages need)."""
    length, encoded = len(value), b""
    while True:
        encoded += bytes([(length & 0x7F) | (0x80 if length > 0x7F else 0)])
        length >>= 7
        if not length:
            break
    return bytes([number << 3 | 2]) + encoded + value


def _envelope(api_version: str, kind: str, *fields: bytes) -> bytes:
    type_meta = _field(1, api_version.encode()) + _field(2, kind.encode())
    return protobuf.MAGIC + _field(1, type_meta) + _field(2, b"".join(fields))


def _strings(*pairs: tuple[int, str]) -> bytes:
    return b"".join(_field(number, text.encode()) for number, text in pairs)


def test_protobuf_access_review() -> None:
    """The SelfSubjectAccessReview ``kubectl auth can-i`` sends decodes to its attributes."""
    attributes = _strings((1, "team"), (2, "create"), (3, "agentpool.dev"), (5, "agentpools"))
    body = _envelope(
        "authorization.k8s.io/v1",
        "SelfSubjectAccessReview",
        _field(1, b""),
        _field(2, _field(1, attributes + _strings((6, "call")))),
    )
    assert protobuf.decode(body) == {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {
                "namespace": "team",
                "verb": "create",
                "group": "agentpool.dev",
                "resource": "agentpools",
                "subresource": "call",
            }
        },
    }


def test_protobuf_subject_access_review_extra() -> None:
    """A SubjectAccessReview's extra is a map of string lists, as in JSON."""
    extra = _field(5, _strings((1, "scope")) + _field(2, _strings((1, "a"), (1, "b"))))
    spec = _strings((3, "bob"), (4, "devs")) + extra
    body = _envelope("authorization.k8s.io/v1", "SubjectAccessReview", _field(2, spec))
    assert protobuf.decode(body)["spec"] == {
        "user": "bob",
        "groups": ["devs"],
        "extra": {"scope": ["a", "b"]},
    }


def test_protobuf_rbac_objects() -> None:
    """``kubectl create clusterrole|rolebinding`` bodies decode with the core group kept as an
    empty string in ``apiGroups``."""
    rule = _strings((1, "get"), (2, ""), (3, "pods"))
    role = _envelope(
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
        _field(1, _strings((1, "r"))),
        _field(2, rule),
    )
    assert protobuf.decode(role)["rules"] == [
        {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}
    ]
    binding = _envelope(
        "rbac.authorization.k8s.io/v1",
        "RoleBinding",
        _field(1, _strings((1, "rb"))),
        _field(2, _strings((1, "ServiceAccount"), (3, "worker"), (4, "team"))),
        _field(3, _strings((1, "rbac.authorization.k8s.io"), (2, "ClusterRole"), (3, "caller"))),
    )
    decoded = protobuf.decode(binding)
    assert decoded["subjects"] == [
        {"kind": "ServiceAccount", "name": "worker", "namespace": "team"}
    ]
    assert decoded["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "caller",
    }


EVENTS = ResourceType("", "v1", "events", "Event", "event", namespaced=True)


def test_an_event_of_the_new_api_prints_its_series_and_reporter() -> None:
    """An event posted through events.k8s.io (eventTime and series, no timestamps or count,
    reportingComponent for a source) prints as kube-apiserver prints it: first seen from its
    eventTime, last seen and count from its series, source from its reporter; a singleton
    counts 1, an event about a kind alone names just the kind."""
    now = datetime(2026, 1, 1, 0, 10, tzinfo=UTC)
    series = {
        "metadata": {"name": "e1"},
        "involvedObject": {"kind": "PoolRun", "name": "quickstart", "fieldPath": "spec.source"},
        "type": "Warning",
        "reason": "ItemsFailed",
        "message": " 2 of 40 items failed \n",
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "series": {"count": 5, "lastObservedTime": "2026-01-01T00:09:00.000000Z"},
        "reportingComponent": "agentpool",
        "reportingInstance": "operator-0",
    }
    single = {
        "metadata": {"name": "e2"},
        "involvedObject": {"kind": "Node"},
        "eventTime": "2026-01-01T00:05:00.000000Z",
    }
    table = build_table(EVENTS, [series, single], resource_version="1", now=lambda: now)
    assert [row["cells"] for row in table["rows"]] == [
        [
            "60s",
            "Warning",
            "ItemsFailed",
            "poolrun/quickstart",
            "spec.source",
            "agentpool, operator-0",
            "2 of 40 items failed",
            "10m",
            5,
            "e1",
        ],
        ["5m", "", "", "node", "", "", "", "5m", 1, "e2"],
    ]
    assert [(c["name"], c["priority"]) for c in table["columnDefinitions"]][:5] == [
        ("Last Seen", 0),
        ("Type", 0),
        ("Reason", 0),
        ("Object", 0),
        ("Subobject", 1),
    ]
