"""What a real API server refuses in names, labels and sizes, and how it words the refusal.

Label keys and values, object names by kind, generateName, annotation keys, ConfigMap data,
request bodies over 3 MiB and objects over etcd's 1.5 MiB request limit. Every write here is a
dry run or a refused one unless it must be stored, so the suite leaves little behind; each test
runs against the local API server and, with ``--kube-context``, against a real one.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client as k8s

from conftest import GROUP, PLURAL, VERSION, raw

LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
DRY = [("dryRun", "All")]


@pytest.fixture
def api(api_client: k8s.ApiClient) -> k8s.ApiClient:
    return api_client


def _create(
    api: k8s.ApiClient, path: str, body: dict[str, Any], *, dry: bool = True
) -> tuple[int, Any]:
    reply = raw(api, "POST", path, body=body, query=DRY if dry else [])
    return reply.status, reply.body


def _configmap(namespace: str, **metadata: Any) -> tuple[str, dict[str, Any]]:
    return f"/api/v1/namespaces/{namespace}/configmaps", {"metadata": {"name": "cm", **metadata}}


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    value=st.one_of(
        st.text(alphabet="abcXYZ019-_.", max_size=70),
        st.text(alphabet="ab-_.:/ é", max_size=8),
    )
)
def test_label_values_are_checked(api: k8s.ApiClient, namespace: str, value: str) -> None:
    """A label value is accepted when it has at most 63 characters and matches the pattern;
    otherwise 422 names the value in the real server's words."""
    path, body = _configmap(namespace, labels={"k": value})
    status, answer = _create(api, path, body)
    valid = len(value.encode()) <= 63 and LABEL_VALUE.fullmatch(value) is not None
    if valid:
        assert status == 201, answer
        return
    assert status == 422, answer
    assert answer["reason"] == "Invalid"
    assert answer["details"]["causes"][0]["field"] == "metadata.labels"
    if len(value) > 63 and value.isascii():
        assert (
            f'metadata.labels: Invalid value: "{value}": must be no more than 63 characters'
            in (answer["message"])
        )


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("a" * 64, "name part must be no more than 63 bytes"),
        ("example.com/" + "a" * 64, "name part must be no more than 63 bytes"),
        ("-a", "name part must consist of alphanumeric characters"),
        ("/a", "prefix part must be non-empty"),
        ("Example.com/a", "prefix part a lowercase RFC 1123 subdomain must consist of"),
        ("a" * 254 + "/a", "prefix part must be no more than 253 bytes"),
        ("a/b/c", "a valid label key must consist of alphanumeric characters"),
    ],
)
def test_label_keys_are_checked(api: k8s.ApiClient, namespace: str, key: str, message: str) -> None:
    path, body = _configmap(namespace, labels={key: "v"})
    status, answer = _create(api, path, body)
    assert status == 422, answer
    assert f'metadata.labels: Invalid value: "{key}": {message}' in answer["message"]


def test_a_good_prefixed_label_key_is_taken(api: k8s.ApiClient, namespace: str) -> None:
    path, body = _configmap(namespace, labels={"example.com/" + "a" * 63: "v" * 63})
    assert _create(api, path, body)[0] == 201


def test_annotation_keys_are_label_keys_in_any_case(api: k8s.ApiClient, namespace: str) -> None:
    path, body = _configmap(namespace, annotations={"Example.COM/Key": "v"})
    assert _create(api, path, body)[0] == 201
    path, body = _configmap(namespace, annotations={"a b": "v"})
    status, answer = _create(api, path, body)
    assert status == 422
    assert 'metadata.annotations: Invalid value: "a b": name part must consist' in answer["message"]


@pytest.mark.parametrize(
    ("resource", "name", "message"),
    [
        ("configmaps", "a" * 254, "must be no more than 253 characters"),
        ("configmaps", "A", "a lowercase RFC 1123 subdomain must consist of"),
        ("pods", "a." * 126 + "ab", "must be no more than 253 characters"),
        ("services", "a" * 64, "must be no more than 63 characters"),
        ("services", "a.b", "must not contain dots"),
    ],
)
def test_names_follow_each_kinds_rule(
    api: k8s.ApiClient, namespace: str, resource: str, name: str, message: str
) -> None:
    body: dict[str, Any] = {"metadata": {"name": name}}
    if resource == "pods":
        body["spec"] = {"containers": [{"name": "c", "image": "i"}]}
    if resource == "services":
        body["spec"] = {"ports": [{"port": 80}]}
    status, answer = _create(api, f"/api/v1/namespaces/{namespace}/{resource}", body)
    assert status == 422, answer
    assert f'metadata.name: Invalid value: "{name}": {message}' in answer["message"]


def test_a_long_subdomain_name_is_taken(api: k8s.ApiClient, namespace: str) -> None:
    name = ".".join(["a" * 63] * 4)[:253].rstrip(".")
    path, body = _configmap(namespace)
    body["metadata"]["name"] = name
    assert _create(api, path, body)[0] == 201


def test_namespace_names_are_dns_labels(api: k8s.ApiClient) -> None:
    status, answer = _create(api, "/api/v1/namespaces", {"metadata": {"name": "a.b"}})
    assert status == 422
    assert 'metadata.name: Invalid value: "a.b": must not contain dots' in answer["message"]
    status, answer = _create(api, "/api/v1/namespaces", {"metadata": {"name": "n" * 64}})
    assert status == 422
    assert "must be no more than 63 characters" in answer["message"]


def test_custom_resource_names_are_subdomains(
    api: k8s.ApiClient, namespace: str, widgets: str
) -> None:
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Widget", "spec": {"replicas": 1}}
    status, answer = _create(api, path, {**body, "metadata": {"name": "w" * 254}})
    assert status == 422
    assert "must be no more than 253 characters" in answer["message"]
    assert _create(api, path, {**body, "metadata": {"name": "a.b-c"}})[0] == 201


@pytest.mark.parametrize("resource", ["configmaps", "services"])
def test_generate_name_is_cut_to_58_characters(
    api: k8s.ApiClient, namespace: str, resource: str
) -> None:
    """The prefix is cut to 58 characters and 5 random ones follow, so even a DNS-label kind
    gets a valid name from a long prefix."""
    body: dict[str, Any] = {"metadata": {"generateName": "g" * 62}}
    if resource == "services":
        body["spec"] = {"ports": [{"port": 80}]}
    status, answer = _create(api, f"/api/v1/namespaces/{namespace}/{resource}", body)
    assert status == 201, answer
    name = answer["metadata"]["name"]
    assert len(name) == 63
    assert name.startswith("g" * 58)
    assert not name[58:].startswith("gggg")


def test_configmap_data_over_1_mib_is_refused(api: k8s.ApiClient, namespace: str) -> None:
    path, body = _configmap(namespace)
    status, answer = _create(api, path, {**body, "data": {"a": "x" * (1024 * 1024 + 1)}})
    assert status == 422, answer
    assert "Too long: may not be more than 1048576 bytes" in answer["message"]
    assert _create(api, path, {**body, "data": {"a": "x" * (1024 * 1024)}})[0] == 201


def test_a_request_body_over_3_mib_is_refused(api: k8s.ApiClient, namespace: str) -> None:
    path, body = _configmap(namespace)
    status, answer = _create(api, path, {**body, "data": {"a": "x" * (3 * 1024 * 1024)}})
    assert status == 413
    assert answer["reason"] == "RequestEntityTooLarge"
    assert answer["message"] == "Request entity too large: limit is 3145728"


def test_an_object_too_large_for_etcd_is_refused(
    api: k8s.ApiClient, namespace: str, widgets: str
) -> None:
    """A 1.75 MiB custom resource passes the 3 MiB body limit but not etcd's 1.5 MiB request
    limit; kube-apiserver v1.37 passes etcd's error on as a 500. A 1 MiB one is stored. (Past
    2 MiB the real server's own gRPC client refuses first, in other words.)"""
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"

    def widget(name: str, chunks: int) -> dict[str, Any]:
        tags = ["t" * (64 * 1024)] * chunks
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Widget",
            "metadata": {"name": name},
            "spec": {"replicas": 1, "tags": tags},
        }

    status, answer = _create(api, path, widget("huge", 28), dry=False)
    assert status in (413, 500), answer
    assert "request is too large" in answer["message"]
    assert _create(api, path, widget("large", 16), dry=False)[0] == 201
