"""Conformance of reads and watches, with the kubernetes client: selectors, list resource
versions, Table output, watch from a resource version, bookmarks, initial events, 410 Expired."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch

from conftest import CLUSTER_MADE, GROUP, PLURAL, VERSION, Cluster, own_names, raw

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


@pytest.fixture
def core(api_client: k8s.ApiClient) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(api_client)


def _cm(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=a", {"a1", "a2"}),
        ("app==a", {"a1", "a2"}),
        ("app!=a", {"b1", "none"}),
        ("app in (a, b)", {"a1", "a2", "b1"}),
        ("app notin (a)", {"b1", "none"}),
        ("tier", {"a2"}),
        ("!tier", {"a1", "b1", "none"}),
        ("app=a,tier=web", {"a2"}),
    ],
)
def test_label_selectors(
    core: k8s.CoreV1Api, namespace: str, selector: str, expected: set[str]
) -> None:
    """Every label selector operator selects what a real API server selects."""
    core.create_namespaced_config_map(namespace, _cm("a1", app="a"))
    core.create_namespaced_config_map(namespace, _cm("a2", app="a", tier="web"))
    core.create_namespaced_config_map(namespace, _cm("b1", app="b"))
    core.create_namespaced_config_map(namespace, _cm("none"))
    found = core.list_namespaced_config_map(namespace, label_selector=selector)
    assert set(own_names(found.items)) == expected


def test_field_selectors(core: k8s.CoreV1Api, namespace: str) -> None:
    """metadata.name and, for pods, status.phase and spec.nodeName select on the server."""
    for name, node in (("p1", None), ("p2", "n1")):
        spec = {"containers": [{"name": "c", "image": "i"}], "nodeName": node}
        core.create_namespaced_pod(namespace, {"metadata": {"name": name}, "spec": spec})
    core.patch_namespaced_pod_status("p2", namespace, {"status": {"phase": "Running"}})
    by_name = core.list_namespaced_pod(namespace, field_selector="metadata.name=p1")
    assert [p.metadata.name for p in by_name.items] == ["p1"]
    running = core.list_namespaced_pod(namespace, field_selector="status.phase=Running")
    assert [p.metadata.name for p in running.items] == ["p2"]
    unbound = core.list_namespaced_pod(namespace, field_selector="spec.nodeName!=n1")
    assert [p.metadata.name for p in unbound.items] == ["p1"]
    both = core.list_namespaced_pod(
        namespace, field_selector=f"metadata.namespace={namespace},spec.nodeName=n1"
    )
    assert [p.metadata.name for p in both.items] == ["p2"]
    with pytest.raises(k8s.ApiException) as caught:
        core.list_namespaced_pod(namespace, field_selector="spec.bogus=x")
    assert caught.value.status == 400


def test_list_has_resource_version_and_kind(core: k8s.CoreV1Api, namespace: str) -> None:
    """A list carries its kind, apiVersion and a resourceVersion a watch can start from."""
    core.create_namespaced_config_map(namespace, _cm("x"))
    reply = raw(core.api_client, "GET", f"/api/v1/namespaces/{namespace}/configmaps")
    assert reply.body["kind"] == "ConfigMapList"
    assert reply.body["apiVersion"] == "v1"
    assert int(reply.body["metadata"]["resourceVersion"]) >= int(
        reply.body["items"][0]["metadata"]["resourceVersion"]
    )
    assert reply.headers["Content-Type"].startswith("application/json")


def test_table_from_printer_columns(
    api_client: k8s.ApiClient, widgets: str, namespace: str
) -> None:
    """A Table list uses the CRD's printer columns, with dates as human durations."""
    custom = k8s.CustomObjectsApi(api_client)
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Widget",
        "metadata": {"name": "t"},
        "spec": {"replicas": 3, "color": "red"},
    }
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
    reply = raw(api_client, "GET", path, accept=TABLE)
    table = reply.body
    assert table["kind"] == "Table"
    names = [c["name"] for c in table["columnDefinitions"]]
    assert names == ["Name", "Replicas", "Phase", "Color", "Age"]
    assert [c["priority"] for c in table["columnDefinitions"]] == [0, 0, 0, 1, 0]
    cells = table["rows"][0]["cells"]
    assert cells[:4] == ["t", 3, None, "red"]
    assert cells[4].endswith("s")
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    full = raw(api_client, "GET", path, accept=TABLE, query=[("includeObject", "Object")])
    assert full.body["rows"][0]["object"]["spec"]["replicas"] == 3
    none = raw(api_client, "GET", path, accept=TABLE, query=[("includeObject", "None")])
    assert none.body["rows"][0].get("object") is None


def test_pod_table_columns(core: k8s.CoreV1Api, namespace: str) -> None:
    """Pods print NAME READY STATUS RESTARTS AGE, with IP and NODE for -o wide."""
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    core.create_namespaced_pod(namespace, pod)
    reply = raw(core.api_client, "GET", f"/api/v1/namespaces/{namespace}/pods", accept=TABLE)
    columns = [(c["name"], c["priority"]) for c in reply.body["columnDefinitions"]]
    assert columns[:7] == [
        ("Name", 0),
        ("Ready", 0),
        ("Status", 0),
        ("Restarts", 0),
        ("Age", 0),
        ("IP", 1),
        ("Node", 1),
    ]
    name, ready, phase, restarts = reply.body["rows"][0]["cells"][:4]
    # STATUS is the phase until a node takes the pod, then its container's waiting reason (the
    # local kubelet has no command to run for image "i"), as kubectl prints it.
    assert (name, ready, restarts) == ("p", "0/1", "0")
    assert phase in {"Pending", "NoLocalCommand"}, phase


def _stream(api: k8s.ApiClient, path: str, query: list[tuple[str, str]], limit: int) -> list[Any]:
    """Read up to ``limit`` events of a watch (the server ends it by timeoutSeconds)."""
    method, url, headers, _, _ = api.param_serialize(
        "GET",
        path,
        query_params=[("watch", "true"), *query],
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    response = api.call_api(method, url, headers, _request_timeout=30)
    events = []
    partial = b""
    try:
        assert response.status == 200
        assert response.getheader("Content-Type").startswith("application/json")
        for chunk in response.response.stream(1024 * 64):
            # An event may span chunks: only whole lines are events.
            *lines, partial = (partial + chunk).split(b"\n")
            for line in lines:
                if line.strip():
                    event = json.loads(line)
                    name = (event.get("object") or {}).get("metadata", {}).get("name")
                    if name not in CLUSTER_MADE:
                        events.append(event)
            if len(events) >= limit:
                break
    finally:
        response.response.release_conn()
    return events


def test_watch_from_resource_version(core: k8s.CoreV1Api, namespace: str) -> None:
    """A watch from a list's resourceVersion sees only later changes, in order."""
    core.create_namespaced_config_map(namespace, _cm("before"))
    rv = core.list_namespaced_config_map(namespace).metadata.resource_version
    core.create_namespaced_config_map(namespace, _cm("after"))
    core.patch_namespaced_config_map("after", namespace, {"data": {"a": "1"}})
    core.delete_namespaced_config_map("after", namespace)
    events = _stream(
        core.api_client,
        f"/api/v1/namespaces/{namespace}/configmaps",
        [("resourceVersion", rv), ("timeoutSeconds", "5")],
        3,
    )
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "after"),
        ("MODIFIED", "after"),
        ("DELETED", "after"),
    ]


def test_watch_without_version_lists_first(core: k8s.CoreV1Api, namespace: str) -> None:
    """A watch with no resourceVersion starts with an ADDED event per existing object."""
    core.create_namespaced_config_map(namespace, _cm("one"))
    core.create_namespaced_config_map(namespace, _cm("two"))
    events = _stream(
        core.api_client, f"/api/v1/namespaces/{namespace}/configmaps", [("timeoutSeconds", "5")], 2
    )
    assert sorted(e["object"]["metadata"]["name"] for e in events) == ["one", "two"]
    assert {e["type"] for e in events} == {"ADDED"}


def test_watch_with_selector_sees_objects_leave(core: k8s.CoreV1Api, namespace: str) -> None:
    """An object relabelled out of a watched selector arrives as DELETED, back in as ADDED. The
    DELETED event carries the object as the watch last matched it (its old labels), at the
    version of the edit, as the Kubernetes API server's watch cache sends it."""
    core.create_namespaced_config_map(namespace, _cm("s", app="x"))
    rv = core.list_namespaced_config_map(namespace).metadata.resource_version
    core.patch_namespaced_config_map("s", namespace, {"metadata": {"labels": {"app": "y"}}})
    core.patch_namespaced_config_map("s", namespace, {"metadata": {"labels": {"app": "x"}}})
    events = _stream(
        core.api_client,
        f"/api/v1/namespaces/{namespace}/configmaps",
        [("resourceVersion", rv), ("labelSelector", "app=x"), ("timeoutSeconds", "5")],
        2,
    )
    assert [e["type"] for e in events] == ["DELETED", "ADDED"]
    left = events[0]["object"]["metadata"]
    assert left["labels"] == {"app": "x"}
    assert int(left["resourceVersion"]) > int(rv)
    assert int(events[1]["object"]["metadata"]["resourceVersion"]) > int(left["resourceVersion"])


def test_watch_bookmarks_and_initial_events(core: k8s.CoreV1Api, namespace: str) -> None:
    """sendInitialEvents streams the objects then a bookmark marking the end of them."""
    core.create_namespaced_config_map(namespace, _cm("i"))
    events = _stream(
        core.api_client,
        f"/api/v1/namespaces/{namespace}/configmaps",
        [
            ("sendInitialEvents", "true"),
            ("resourceVersionMatch", "NotOlderThan"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", "5"),
        ],
        2,
    )
    assert events[0]["type"] == "ADDED"
    assert events[1]["type"] == "BOOKMARK"
    annotations = events[1]["object"]["metadata"]["annotations"]
    assert annotations == {"k8s.io/initial-events-end": "true"}
    rejected = raw(
        core.api_client,
        "GET",
        f"/api/v1/namespaces/{namespace}/configmaps",
        query=[("watch", "true"), ("sendInitialEvents", "true")],
    )
    assert rejected.status == 422


def test_watch_timeout_and_python_client_watch(core: k8s.CoreV1Api, namespace: str) -> None:
    """The kubernetes client's Watch works and the server ends the stream at timeoutSeconds."""
    core.create_namespaced_config_map(namespace, _cm("w"))
    seen = [
        event["object"].metadata.name
        for event in k8s_watch.Watch().stream(
            core.list_namespaced_config_map, namespace, timeout_seconds=1
        )
    ]
    assert [name for name in seen if name not in CLUSTER_MADE] == ["w"]


@pytest.mark.local_only("sets the local API server's watch history length")
def test_watch_past_history_is_410_in_stream(
    core: k8s.CoreV1Api, namespace: str, cluster: Cluster
) -> None:
    """A resourceVersion older than the event history gets an in-stream ERROR with code 410."""
    cluster.require_local()
    rv = core.list_namespaced_config_map(namespace).metadata.resource_version
    for index in range(450):
        core.create_namespaced_config_map(namespace, _cm(f"h{index}"))
    events = _stream(
        core.api_client,
        f"/api/v1/namespaces/{namespace}/configmaps",
        [("resourceVersion", rv), ("timeoutSeconds", "5")],
        1,
    )
    assert events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert (status["code"], status["reason"]) == (410, "Expired")
    assert status["message"].startswith(f"too old resource version: {rv} (")


@pytest.mark.local_only("reads the local API server's request counts")
def test_request_counts(core: k8s.CoreV1Api, namespace: str, cluster: Cluster) -> None:
    """Requests are counted by verb and resource, in process and over /debug/counts."""
    local = cluster.require_local()
    local.reset_counts()
    core.create_namespaced_config_map(namespace, _cm("c"))
    core.read_namespaced_config_map("c", namespace)
    core.patch_namespaced_config_map("c", namespace, {"data": {"a": "1"}})
    core.list_namespaced_config_map(namespace)
    counts = local.counts()
    for key in [
        ("create", "configmaps"),
        ("get", "configmaps"),
        ("patch", "configmaps"),
        ("list", "configmaps"),
    ]:
        assert counts[key] == 1
    reply = raw(core.api_client, "GET", "/debug/counts")
    assert {"verb": "patch", "resource": "configmaps", "count": 1} in reply.body


def test_concurrent_watchers_all_see_a_write(core: k8s.CoreV1Api, namespace: str) -> None:
    """Several watches at once each receive the same event."""
    rv = core.list_namespaced_config_map(namespace).metadata.resource_version
    results: list[list[Any]] = [[] for _ in range(5)]

    def watch(slot: int) -> None:
        results[slot] = _stream(
            core.api_client,
            f"/api/v1/namespaces/{namespace}/configmaps",
            [("resourceVersion", rv), ("timeoutSeconds", "10")],
            1,
        )

    threads = [threading.Thread(target=watch, args=(i,)) for i in range(5)]
    for thread in threads:
        thread.start()
    core.create_namespaced_config_map(namespace, _cm("shared"))
    for thread in threads:
        thread.join(15)
    assert [r[0]["object"]["metadata"]["name"] for r in results] == ["shared"] * 5


def test_every_write_is_a_watch_event_with_the_response_version(
    api_client: k8s.ApiClient, widgets: str, namespace: str
) -> None:
    """Each write, status and metadata-only ones too, is one event carrying the answer's RV."""
    custom = k8s.CustomObjectsApi(api_client)
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Widget",
        "metadata": {"name": "rv"},
        "spec": {"replicas": 1},
    }
    made = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    args = (GROUP, VERSION, namespace, PLURAL, "rv")
    answers = [
        custom.patch_namespaced_custom_object(*args, {"spec": {"replicas": 2}}),
        custom.patch_namespaced_custom_object_status(*args, {"status": {"phase": "Up"}}),
        custom.patch_namespaced_custom_object(*args, {"metadata": {"annotations": {"a": "b"}}}),
    ]
    events = _stream(
        api_client,
        f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}",
        [("resourceVersion", made["metadata"]["resourceVersion"]), ("timeoutSeconds", "5")],
        3,
    )
    assert [e["type"] for e in events] == ["MODIFIED"] * 3
    assert [e["object"]["metadata"]["resourceVersion"] for e in events] == [
        a["metadata"]["resourceVersion"] for a in answers
    ]


def test_leases_and_new_style_events(api_client: k8s.ApiClient, namespace: str) -> None:
    """coordination.k8s.io leases and events.k8s.io events are served like any resource."""
    leases = k8s.CoordinationV1Api(api_client)
    leases.create_namespaced_lease(
        namespace, {"metadata": {"name": "l"}, "spec": {"holderIdentity": "me"}}
    )
    assert leases.read_namespaced_lease("l", namespace).spec.holder_identity == "me"
    events = k8s.EventsV1Api(api_client)
    event = {
        "metadata": {"name": "e"},
        "eventTime": "2025-01-01T00:00:00.000000Z",
        "reportingController": "agentpool.dev/test",
        "reportingInstance": "test",
        "action": "Tested",
        "reason": "Tested",
        "type": "Normal",
        "regarding": {"kind": "Lease", "name": "l", "namespace": namespace},
    }
    # Sent as JSON, not through the client's model, which writes eventTime without the
    # microseconds a MicroTime must have (a real API server refuses it).
    created = raw(
        api_client, "POST", f"/apis/events.k8s.io/v1/namespaces/{namespace}/events", body=event
    )
    assert created.status == 201, created.body
    assert [e.reason for e in events.list_namespaced_event(namespace).items] == ["Tested"]


def test_unknown_paths_answer_as_a_cluster_does(api_client: k8s.ApiClient) -> None:
    """An unknown resource of a served group version is a 404 Status in JSON; a group version
    that is not served is no API path, a plain-text 404, as kube-apiserver answers both."""
    reply = raw(api_client, "GET", "/api/v1/things")
    assert reply.status == 404
    assert reply.body["kind"] == "Status"
    assert reply.body["reason"] == "NotFound"
    unserved = raw(api_client, "GET", "/apis/no.such.group/v1/things")
    assert unserved.status == 404
    assert unserved.body.strip() == "404 page not found"


@pytest.mark.local_only("sets the local API server's bookmark interval")
def test_idle_watch_gets_bookmarks(core: k8s.CoreV1Api, namespace: str, cluster: Cluster) -> None:
    """An idle watch that allows bookmarks receives them, so clients keep a fresh version."""
    cluster.require_local()
    rv = core.list_namespaced_config_map(namespace).metadata.resource_version
    events = _stream(
        core.api_client,
        f"/api/v1/namespaces/{namespace}/configmaps",
        [("resourceVersion", rv), ("allowWatchBookmarks", "true"), ("timeoutSeconds", "10")],
        1,
    )
    assert events[0]["type"] == "BOOKMARK"
    assert int(events[0]["object"]["metadata"]["resourceVersion"]) >= int(rv)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/api/v1/namespaces/default/pods/web/log"),
        ("PUT", "/api/v1/namespaces/default/pods/web/log"),
        ("GET", "/api/v1/namespaces/default/serviceaccounts/default/token"),
        ("GET", "/apis/authentication.k8s.io/v1/tokenreviews"),
    ],
)
def test_a_verb_a_resource_does_not_serve_is_405(
    api_client: k8s.ApiClient, method: str, path: str
) -> None:
    """A resource or subresource refuses the verbs discovery does not list for it, with the
    Status kube-apiserver sends, which names no resource."""
    reply = raw(api_client, method, path, body={} if method != "GET" else None)
    assert reply.status == 405
    assert reply.body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the server does not allow this method on the requested resource",
        "reason": "MethodNotAllowed",
        "details": {},
        "code": 405,
    }
