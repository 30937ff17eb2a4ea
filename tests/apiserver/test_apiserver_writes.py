"""Conformance of writes, with the kubernetes client: create, update, the four patch types,
status and scale subresources, generation, validation and dry runs."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s

from conftest import GROUP, PLURAL, VERSION, eventually, raw


def _widget(name: str, replicas: int = 1, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, **spec},
    }


@pytest.fixture
def custom(api_client: k8s.ApiClient, widgets: str) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(api_client)


@pytest.fixture
def core(api_client: k8s.ApiClient) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(api_client)


def test_create_sets_server_fields_and_refuses_duplicates(
    core: k8s.CoreV1Api, namespace: str
) -> None:
    """POST answers 201 with uid, creationTimestamp and resourceVersion; a second POST is 409."""
    made = core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "a"}, "data": {"k": "v"}}
    )
    assert made.metadata.uid
    assert made.metadata.creation_timestamp
    assert made.metadata.resource_version
    assert made.metadata.namespace == namespace
    with pytest.raises(k8s.ApiException) as caught:
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "a"}})
    assert caught.value.status == 409
    assert '"reason":"AlreadyExists"' in caught.value.body.replace(" ", "")


def test_generate_name_makes_unique_names(core: k8s.CoreV1Api, namespace: str) -> None:
    """generateName gives each object the prefix plus a random suffix."""
    names = {
        core.create_namespaced_config_map(
            namespace, {"metadata": {"generateName": "g-"}}
        ).metadata.name
        for _ in range(5)
    }
    assert len(names) == 5
    assert all(n.startswith("g-") and len(n) == 7 for n in names)


def test_missing_object_is_not_found(core: k8s.CoreV1Api, namespace: str) -> None:
    """GET of an absent object is a 404 NotFound Status naming it."""
    with pytest.raises(k8s.ApiException) as caught:
        core.read_namespaced_config_map("nope", namespace)
    assert caught.value.status == 404
    assert 'configmaps \\"nope\\" not found' in caught.value.body


def test_update_with_stale_resource_version_conflicts(core: k8s.CoreV1Api, namespace: str) -> None:
    """PUT with an old resourceVersion is a 409 Conflict; with the current one it succeeds."""
    made = core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "c"}, "data": {"a": "1"}}
    )
    made.data = {"a": "2"}
    updated = core.replace_namespaced_config_map("c", namespace, made)
    assert int(updated.metadata.resource_version) > int(made.metadata.resource_version)
    made.data = {"a": "3"}
    with pytest.raises(k8s.ApiException) as caught:
        core.replace_namespaced_config_map("c", namespace, made)
    assert caught.value.status == 409
    assert "the object has been modified" in caught.value.body


def test_merge_patch_null_deletes_keys(core: k8s.CoreV1Api, namespace: str) -> None:
    """A JSON merge patch removes keys set to null and merges the rest."""
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "m"}, "data": {"a": "1", "b": "2"}}
    )
    reply = raw(
        core.api_client,
        "PATCH",
        f"/api/v1/namespaces/{namespace}/configmaps/m",
        body={"data": {"a": None, "c": "3"}},
        content_type="application/merge-patch+json",
    )
    assert reply.status == 200
    assert reply.body["data"] == {"b": "2", "c": "3"}


def test_json_patch_failed_test_is_422(custom: k8s.CustomObjectsApi, namespace: str) -> None:
    """A JSON patch whose ``test`` op fails is refused with 422, as kopf expects."""
    made = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, _widget("w"))
    rv = made["metadata"]["resourceVersion"]
    ok = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "add", "path": "/metadata/finalizers", "value": ["x.dev/f"]},
    ]
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/w"
    patched = raw(
        custom.api_client, "PATCH", path, body=ok, content_type="application/json-patch+json"
    )
    assert patched.status == 200
    assert patched.body["metadata"]["finalizers"] == ["x.dev/f"]
    again = raw(
        custom.api_client, "PATCH", path, body=ok, content_type="application/json-patch+json"
    )
    assert again.status == 422
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "w", {"metadata": {"finalizers": None}}
    )


def test_strategic_merge_merges_containers_by_name(core: k8s.CoreV1Api, namespace: str) -> None:
    """A strategic merge patch on a pod merges containers by name instead of replacing the list.

    Only the image changes, the one container field a real cluster lets a pod change."""
    pod = {
        "metadata": {"name": "p"},
        "spec": {
            "containers": [
                {"name": "a", "image": "img:1", "env": [{"name": "X", "value": "1"}]},
                {"name": "b", "image": "img:1"},
            ]
        },
    }
    core.create_namespaced_pod(namespace, pod)
    patch = {"spec": {"containers": [{"name": "a", "image": "img:2"}]}}
    patched = core.patch_namespaced_pod("p", namespace, patch)
    containers = {c.name: c for c in patched.spec.containers}
    assert set(containers) == {"a", "b"}
    assert containers["a"].image == "img:2"
    assert [e.name for e in containers["a"].env] == ["X"]


def test_strategic_merge_on_custom_resource_is_415(
    custom: k8s.CustomObjectsApi, namespace: str
) -> None:
    """Custom resources refuse strategic merge with the real server's 415 message."""
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, _widget("s"))
    reply = raw(
        custom.api_client,
        "PATCH",
        f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/s",
        body={"spec": {"replicas": 2}},
        content_type="application/strategic-merge-patch+json",
    )
    assert reply.status == 415
    assert reply.body["reason"] == "UnsupportedMediaType"
    assert reply.body["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )


def test_server_side_apply_creates_then_merges(
    custom: k8s.CustomObjectsApi, namespace: str
) -> None:
    """Server-side apply creates an absent object (201) and merges into an existing one."""
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/a"

    def apply(body: dict[str, Any]) -> tuple[Any, int]:
        reply = raw(
            custom.api_client,
            "PATCH",
            path,
            body=body,
            query=[("fieldManager", "test")],
            content_type="application/apply-patch+yaml",
        )
        return reply.body, reply.status

    created, status = apply(_widget("a", replicas=2))
    assert status == 201
    assert created["spec"]["replicas"] == 2
    merged, status = apply(
        {**_widget("a", replicas=3), "metadata": {"name": "a", "labels": {"x": "y"}}}
    )
    assert status == 200
    assert merged["spec"]["replicas"] == 3
    assert merged["metadata"]["labels"] == {"x": "y"}


def test_status_is_separate_and_generation_follows_spec(
    custom: k8s.CustomObjectsApi, namespace: str
) -> None:
    """The main resource ignores status, /status changes only status, generation counts spec."""
    made = custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, {**_widget("g"), "status": {"phase": "Sneaky"}}
    )
    assert "status" not in made
    assert made["metadata"]["generation"] == 1
    args = (GROUP, VERSION, namespace, PLURAL, "g")
    after_status = custom.patch_namespaced_custom_object_status(
        *args, {"status": {"phase": "Ready"}, "spec": {"replicas": 5}}
    )
    assert after_status["status"] == {"phase": "Ready"}
    assert after_status["spec"]["replicas"] == 1
    assert after_status["metadata"]["generation"] == 1
    after_main = custom.patch_namespaced_custom_object(
        *args, {"spec": {"replicas": 2}, "status": {"phase": "X"}}
    )
    assert after_main["status"] == {"phase": "Ready"}
    assert after_main["metadata"]["generation"] == 2
    labelled = custom.patch_namespaced_custom_object(*args, {"metadata": {"labels": {"a": "b"}}})
    assert labelled["metadata"]["generation"] == 2


def test_noop_patch_keeps_resource_version(custom: k8s.CustomObjectsApi, namespace: str) -> None:
    """A patch that changes nothing is not a write: the resourceVersion stays."""
    made = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, _widget("n"))
    same = custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "n", {"spec": {"replicas": 1}}
    )
    assert same["metadata"]["resourceVersion"] == made["metadata"]["resourceVersion"]


def test_schema_defaults_are_applied(custom: k8s.CustomObjectsApi, namespace: str) -> None:
    """Fields with a schema default are filled in on create."""
    made = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, _widget("d"))
    assert made["spec"]["maxReplicas"] == 10


def test_cel_rule_failure_is_422_with_message(custom: k8s.CustomObjectsApi, namespace: str) -> None:
    """A CEL rule that fails answers 422 Invalid naming the field and the rule's message."""
    with pytest.raises(k8s.ApiException) as caught:
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, _widget("bad", replicas=20)
        )
    assert caught.value.status == 422
    assert (
        'Widget.test.agentpool.dev \\"bad\\" is invalid: spec.replicas: '
        "Invalid value: replicas must not exceed maxReplicas" in caught.value.body
    )


def test_schema_violations_are_422(custom: k8s.CustomObjectsApi, namespace: str) -> None:
    """Type, minimum and enum violations are each reported as a field cause."""
    with pytest.raises(k8s.ApiException) as caught:
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, _widget("bad", replicas=-1, color="green")
        )
    assert caught.value.status == 422
    body = caught.value.body
    assert (
        "spec.replicas: Invalid value: -1: spec.replicas in body "
        "should be greater than or equal to 0" in body
    )
    assert (
        'spec.color: Unsupported value: \\"green\\": supported values: \\"red\\", \\"blue\\"'
        in body
    )


def test_strict_field_validation_rejects_unknown_fields(
    custom: k8s.CustomObjectsApi, namespace: str
) -> None:
    """fieldValidation=Strict is a 400 naming the unknown field; the default prunes it."""
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
    strict = raw(
        custom.api_client,
        "POST",
        path,
        body=_widget("u", bogus=1),
        query=[("fieldValidation", "Strict")],
    )
    assert strict.status == 400
    assert strict.body["message"] == (
        'Widget in version "v1" cannot be handled as a Widget: strict decoding error: '
        'unknown field "spec.bogus"'
    )
    warn = raw(
        custom.api_client,
        "POST",
        path,
        body=_widget("u", bogus=1),
        query=[("fieldValidation", "Warn")],
    )
    assert warn.status == 201
    assert 'unknown field \\"spec.bogus\\"' in warn.headers.get("Warning", "")
    stored = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "u")
    assert "bogus" not in stored["spec"]


def test_dry_run_stores_nothing(core: k8s.CoreV1Api, namespace: str) -> None:
    """dryRun=All answers as if written but leaves the store untouched."""
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "dry"}}, dry_run="All")
    with pytest.raises(k8s.ApiException):
        core.read_namespaced_config_map("dry", namespace)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "dry"}, "data": {"a": "1"}})
    core.patch_namespaced_config_map("dry", namespace, {"data": {"a": "2"}}, dry_run="All")
    core.delete_namespaced_config_map("dry", namespace, dry_run="All")
    assert core.read_namespaced_config_map("dry", namespace).data == {"a": "1"}


def test_scale_subresource(custom: k8s.CustomObjectsApi, namespace: str) -> None:
    """The scale subresource reads and writes replicas through an autoscaling/v1 Scale."""
    custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, _widget("sc", replicas=2)
    )
    args = (GROUP, VERSION, namespace, PLURAL, "sc")
    custom.patch_namespaced_custom_object_status(
        *args, {"status": {"replicas": 2, "selector": "app=sc"}}
    )
    scale = custom.get_namespaced_custom_object_scale(*args)
    assert scale["kind"] == "Scale"
    assert scale["spec"]["replicas"] == 2
    assert scale["status"] == {"replicas": 2, "selector": "app=sc"}
    scaled = custom.patch_namespaced_custom_object_scale(*args, {"spec": {"replicas": 4}})
    assert scaled["spec"]["replicas"] == 4
    assert custom.get_namespaced_custom_object(*args)["spec"]["replicas"] == 4
    scale = custom.get_namespaced_custom_object_scale(*args)
    scale["spec"]["replicas"] = 3
    assert custom.replace_namespaced_custom_object_scale(*args, scale)["spec"]["replicas"] == 3
    with pytest.raises(k8s.ApiException) as caught:
        custom.replace_namespaced_custom_object_scale(*args, scale)
    assert caught.value.status == 409


def test_namespace_from_url_and_mismatch(core: k8s.CoreV1Api, namespace: str) -> None:
    """The URL's namespace fills the object; a body naming another namespace is a 400."""
    with pytest.raises(k8s.ApiException) as caught:
        core.create_namespaced_config_map(
            namespace, {"metadata": {"name": "x", "namespace": "other"}}
        )
    assert caught.value.status == 400
    with pytest.raises(k8s.ApiException) as missing:
        core.create_namespaced_config_map("no-such-ns", {"metadata": {"name": "x"}})
    assert missing.value.status == 404


def test_nulls_vanish_from_built_in_objects(core: k8s.CoreV1Api, namespace: str) -> None:
    """A null field in a built-in object is dropped, as typed decoding drops it on a cluster."""
    spec = {"containers": [{"name": "c", "image": "i"}], "nodeName": None}
    core.create_namespaced_pod(namespace, {"metadata": {"name": "nul"}, "spec": spec})
    stored = raw(core.api_client, "GET", f"/api/v1/namespaces/{namespace}/pods/nul").body
    assert "nodeName" not in stored["spec"]


def test_annotations_past_256_kib_are_refused(core: k8s.CoreV1Api, namespace: str) -> None:
    """As a real API server does: all annotations together take at most 262,144 bytes, on create
    and on patch, and the error names the field."""
    big = {"metadata": {"name": "big", "annotations": {"a": "x" * (256 * 1024)}}}
    with pytest.raises(k8s.ApiException) as caught:
        core.create_namespaced_config_map(namespace, big)
    assert caught.value.status == 422
    assert "metadata.annotations: Too long: may not be more than 262144 bytes" in caught.value.body
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "small"}})
    with pytest.raises(k8s.ApiException) as caught:
        core.patch_namespaced_config_map(
            "small", namespace, {"metadata": big["metadata"] | {"name": "small"}}
        )
    assert caught.value.status == 422
    fits = {"metadata": {"annotations": {"a": "x" * (256 * 1024 - 1)}}}
    core.patch_namespaced_config_map("small", namespace, fits)


def test_a_pod_runs_as_a_service_account(core: k8s.CoreV1Api, namespace: str) -> None:
    """A pod that names no service account runs as ``default``, and the deprecated
    ``serviceAccount`` reads the same name, as the ServiceAccount admission plugin sets them."""
    pod = {
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox:1", "command": ["sleep", "60"]}]},
    }

    def created() -> Any:
        # A real cluster admits the pod once its controller has made the default account.
        try:
            return core.create_namespaced_pod(namespace, pod)
        except k8s.ApiException as error:
            if error.status != 403:
                raise
            return None

    made = eventually(created, timeout=30, what="the pod to be admitted")
    assert (made.spec.service_account_name, made.spec.service_account) == ("default", "default")
    core.delete_namespaced_pod("p", namespace, grace_period_seconds=0)


def _pod(name: str, container: str = "agent", **fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": container, "image": "agent:1", **fields}]},
    }


def test_strict_field_validation_refuses_a_pod_with_a_misspelt_container_field(
    core: k8s.CoreV1Api, namespace: str
) -> None:
    """A pod template's typo (``comand``) is a 400 naming the field under Strict, as kubectl
    and the operator send; the default drops the field and warns."""
    path = f"/api/v1/namespaces/{namespace}/pods"
    body = _pod("typo", comand=["run"])
    strict = raw(core.api_client, "POST", path, body=body, query=[("fieldValidation", "Strict")])
    assert strict.status == 400
    assert strict.body["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
        'unknown field "spec.containers[0].comand"'
    )
    dry = [("fieldValidation", "Warn"), ("dryRun", "All")]
    warn = raw(core.api_client, "POST", path, body=body, query=dry)
    assert warn.status == 201
    assert "comand" not in warn.body["spec"]["containers"][0]
    assert 'unknown field \\"spec.containers[0].comand\\"' in warn.headers.get("Warning", "")


def test_a_pod_with_an_invalid_container_name_is_refused_naming_it(
    core: k8s.CoreV1Api, namespace: str
) -> None:
    """A container name that is no DNS label is a 422 in the API server's words."""
    path = f"/api/v1/namespaces/{namespace}/pods"
    refused = raw(core.api_client, "POST", path, body=_pod("bad-name", container="Bad_Name"))
    assert refused.status == 422
    assert (
        'spec.containers[0].name: Invalid value: "Bad_Name": a lowercase RFC 1123 label must '
        "consist of lower case alphanumeric characters or '-'"
    ) in refused.body["message"]


def test_a_dry_run_pod_create_is_checked_and_stores_nothing(
    core: k8s.CoreV1Api, namespace: str
) -> None:
    """dryRun=All on a pod answers the pod as it would be made, and makes none."""
    path = f"/api/v1/namespaces/{namespace}/pods"
    answered = raw(core.api_client, "POST", path, body=_pod("dry"), query=[("dryRun", "All")])
    assert answered.status == 201
    assert answered.body["spec"]["containers"][0]["name"] == "agent"
    assert core.list_namespaced_pod(namespace).items == []
