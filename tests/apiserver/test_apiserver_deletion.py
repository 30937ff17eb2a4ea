"""Conformance of deletion, with the kubernetes client: finalizers and deletionTimestamp,
propagation policies and owner-reference garbage collection, deletecollection, namespaces,
CRD registration and pod logs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from agentpool.local.apiserver import LOG_PATH_ANNOTATION
from conftest import Cluster, eventually, own_names, raw


@pytest.fixture
def core(api_client: k8s.ApiClient) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(api_client)


def _gone(core: k8s.CoreV1Api, namespace: str, name: str) -> bool:
    try:
        core.read_namespaced_config_map(name, namespace)
    except k8s.ApiException as error:
        return error.status == 404
    return False


def _owned(name: str, owner: Any) -> dict[str, Any]:
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": owner.metadata.name,
        "uid": owner.metadata.uid,
    }
    return {"metadata": {"name": name, "ownerReferences": [ref]}}


def test_finalizers_hold_deletion(core: k8s.CoreV1Api, namespace: str) -> None:
    """A finalized object gets a deletionTimestamp and stays until its last finalizer goes."""
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "f", "finalizers": ["example.com/hold"]}}
    )
    core.delete_namespaced_config_map("f", namespace)
    held = core.read_namespaced_config_map("f", namespace)
    assert held.metadata.deletion_timestamp is not None
    with pytest.raises(k8s.ApiException) as caught:
        core.patch_namespaced_config_map(
            "f", namespace, {"metadata": {"finalizers": ["example.com/hold", "example.com/new"]}}
        )
    assert caught.value.status == 422
    core.patch_namespaced_config_map("f", namespace, {"metadata": {"finalizers": None}})
    assert _gone(core, namespace, "f")


def test_background_deletion_collects_dependents(core: k8s.CoreV1Api, namespace: str) -> None:
    """Deleting an owner deletes the objects that name it in ownerReferences."""
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    core.create_namespaced_config_map(namespace, _owned("child", owner))
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "stranger"}})
    core.delete_namespaced_config_map("owner", namespace, propagation_policy="Background")
    eventually(lambda: _gone(core, namespace, "child"), what="the child to be collected")
    assert core.read_namespaced_config_map("stranger", namespace).metadata.name == "stranger"


def test_dependent_with_another_live_owner_survives(core: k8s.CoreV1Api, namespace: str) -> None:
    """A dependent keeps living while another owner remains, losing only the dead reference."""
    first = core.create_namespaced_config_map(namespace, {"metadata": {"name": "o1"}})
    second = core.create_namespaced_config_map(namespace, {"metadata": {"name": "o2"}})
    body = _owned("shared", first)
    body["metadata"]["ownerReferences"] += _owned("x", second)["metadata"]["ownerReferences"]
    core.create_namespaced_config_map(namespace, body)
    core.delete_namespaced_config_map("o1", namespace)

    def one_ref_left() -> bool:
        refs = core.read_namespaced_config_map("shared", namespace).metadata.owner_references
        return [r.name for r in refs] == ["o2"]

    eventually(one_ref_left, what="the dead owner reference to be removed")


def test_foreground_deletion_waits_for_dependents(core: k8s.CoreV1Api, namespace: str) -> None:
    """Foreground deletion removes dependents first, then the owner: it waits for those that
    block their owner's deletion, as the garbage collector does, and deletes the rest too."""
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "fg"}})
    body = _owned("held", owner)
    body["metadata"]["finalizers"] = ["example.com/hold"]
    body["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] = True
    core.create_namespaced_config_map(namespace, body)
    loose = _owned("loose", owner)
    loose["metadata"]["finalizers"] = ["example.com/hold"]
    core.create_namespaced_config_map(namespace, loose)
    core.delete_namespaced_config_map("fg", namespace, propagation_policy="Foreground")
    waiting = core.read_namespaced_config_map("fg", namespace)
    assert "foregroundDeletion" in waiting.metadata.finalizers
    eventually(
        lambda: core.read_namespaced_config_map("held", namespace).metadata.deletion_timestamp,
        what="the dependent to be marked for deletion",
    )
    eventually(
        lambda: core.read_namespaced_config_map("loose", namespace).metadata.deletion_timestamp,
        what="the non-blocking dependent to be marked for deletion",
    )
    assert not _gone(core, namespace, "fg")
    core.patch_namespaced_config_map("held", namespace, {"metadata": {"finalizers": None}})
    eventually(lambda: _gone(core, namespace, "fg"), what="the owner to go after its dependents")
    assert not _gone(core, namespace, "loose"), "a dependent that does not block is not waited on"
    core.patch_namespaced_config_map("loose", namespace, {"metadata": {"finalizers": None}})


def test_orphan_deletion_keeps_dependents(core: k8s.CoreV1Api, namespace: str) -> None:
    """Orphan deletion removes the owner and strips the reference from its dependents."""
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "parent"}})
    core.create_namespaced_config_map(namespace, _owned("orphan", owner))
    core.delete_namespaced_config_map("parent", namespace, propagation_policy="Orphan")
    eventually(lambda: _gone(core, namespace, "parent"), what="the owner to go")
    survivor = core.read_namespaced_config_map("orphan", namespace)
    assert not survivor.metadata.owner_references


def test_delete_collection_with_selector(core: k8s.CoreV1Api, namespace: str) -> None:
    """deletecollection deletes what the selector matches and nothing else."""
    for name, app in (("d1", "x"), ("d2", "x"), ("k1", "y")):
        core.create_namespaced_config_map(
            namespace, {"metadata": {"name": name, "labels": {"app": app}}}
        )
    core.delete_collection_namespaced_config_map(namespace, label_selector="app=x")
    left = core.list_namespaced_config_map(namespace)
    assert own_names(left.items) == ["k1"]


def test_delete_precondition_uid(core: k8s.CoreV1Api, namespace: str) -> None:
    """A delete whose uid precondition does not match is a 409 Conflict."""
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "u"}})
    with pytest.raises(k8s.ApiException) as caught:
        core.delete_namespaced_config_map(
            "u", namespace, body=k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid="x"))
        )
    assert caught.value.status == 409


def test_namespace_deletion_empties_it(core: k8s.CoreV1Api) -> None:
    """Deleting a namespace deletes its contents and then the namespace; writes into it stop."""
    name = core.create_namespace({"metadata": {"generateName": "aptest-gone-"}}).metadata.name
    core.create_namespaced_config_map(name, {"metadata": {"name": "inside"}})
    core.delete_namespace(name)

    def gone() -> bool:
        try:
            core.read_namespace(name)
        except k8s.ApiException as error:
            return error.status == 404
        return False

    eventually(gone, timeout=60, what="the namespace to be deleted")
    with pytest.raises(k8s.ApiException) as caught:
        core.create_namespaced_config_map(name, {"metadata": {"name": "late"}})
    assert caught.value.status in (403, 404)


def test_default_namespace_exists(core: k8s.CoreV1Api) -> None:
    """The default namespace is there from the start, Active."""
    assert core.read_namespace("default").status.phase == "Active"


def test_crd_registers_its_resource(api_client: k8s.ApiClient, widgets: str) -> None:
    """An applied CRD appears in discovery with its subresources, short names and categories."""
    reply = raw(api_client, "GET", f"/apis/{widgets}/v1")
    entries = {r["name"]: r for r in reply.body["resources"]}
    assert entries["widgets"]["shortNames"] == ["wdg"]
    assert entries["widgets"]["categories"] == ["widget-all"]
    assert entries["widgets/scale"]["group"] == "autoscaling"
    assert entries["widgets/scale"]["kind"] == "Scale"
    assert "widgets/status" in entries
    groups = raw(api_client, "GET", "/apis").body["groups"]
    assert widgets in {g["name"] for g in groups}


@pytest.mark.local_only("inspects the local API server's registry")
def test_crd_deletion_unregisters_the_resource(api_client: k8s.ApiClient, cluster: Cluster) -> None:
    """Deleting a CRD removes its resource from discovery and the API."""
    cluster.require_local()
    ext = k8s.ApiextensionsV1Api(api_client)
    crd = {
        "metadata": {"name": "gadgets.gone.agentpool.dev"},
        "spec": {
            "group": "gone.agentpool.dev",
            "scope": "Cluster",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
    ext.create_custom_resource_definition(crd)
    custom = k8s.CustomObjectsApi(api_client)
    body = {"apiVersion": "gone.agentpool.dev/v1", "kind": "Gadget", "metadata": {"name": "g"}}
    custom.create_cluster_custom_object("gone.agentpool.dev", "v1", "gadgets", body)
    ext.delete_custom_resource_definition("gadgets.gone.agentpool.dev")
    assert raw(api_client, "GET", "/apis/gone.agentpool.dev/v1/gadgets").status == 404
    assert raw(api_client, "GET", "/apis/gone.agentpool.dev/v1").status == 404


@pytest.mark.local_only("serves a log file through the local API server's annotation")
def test_pod_log_served_from_annotated_file(
    core: k8s.CoreV1Api, namespace: str, cluster: Cluster, tmp_path: Path
) -> None:
    """pods/log serves the file named by the kubelet's annotation, honouring tailLines."""
    cluster.require_local()
    log = tmp_path / "p.log"
    log.write_text("one\ntwo\nthree\n")
    pod = {
        "metadata": {"name": "lp", "annotations": {LOG_PATH_ANNOTATION: str(log)}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    core.create_namespaced_pod(namespace, pod)
    assert core.read_namespaced_pod_log("lp", namespace) == "one\ntwo\nthree\n"
    assert core.read_namespaced_pod_log("lp", namespace, tail_lines=2) == "two\nthree\n"
    core.patch_namespaced_pod_status("lp", namespace, {"status": {"phase": "Succeeded"}})
    followed = core.read_namespaced_pod_log("lp", namespace, follow=True, _request_timeout=10)
    assert followed == "one\ntwo\nthree\n"
