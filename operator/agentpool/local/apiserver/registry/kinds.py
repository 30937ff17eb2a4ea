"""What the API server sets on particular built-in kinds: pod defaults (the service account
included), namespace phase, service cluster IPs, secret ``stringData``, RBAC bindings
(``bindings``), CRD status, and the custom-resource status rule.

``writes`` calls ``prepare_create`` before storing a new object and ``prepare_update`` before
storing a changed one; both return field causes the write reports as 422 Invalid.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
from typing import Any

from agentpool.local.apiserver.errors import Cause
from agentpool.local.apiserver.registry.bindings import BINDINGS, binding_causes
from agentpool.local.apiserver.registry.crds import check_crd, crd_status
from agentpool.local.apiserver.resources import ResourceType

Obj = dict[str, Any]

_CLUSTER_IPS = itertools.count(10)
_POD_DEFAULTS = {
    "restartPolicy": "Always",
    "terminationGracePeriodSeconds": 30,
    "dnsPolicy": "ClusterFirst",
    "schedulerName": "default-scheduler",
    "securityContext": {},
    "enableServiceLinks": True,
}


#: The fields of a pod's container (``io.k8s.api.core.v1.Container``): any other is unknown, so
#: dropped, warned of, or refused under ``fieldValidation=Strict``, as the API server decodes.
CONTAINER_FIELDS = frozenset(
    {
        "args",
        "command",
        "env",
        "envFrom",
        "image",
        "imagePullPolicy",
        "lifecycle",
        "livenessProbe",
        "name",
        "ports",
        "readinessProbe",
        "resizePolicy",
        "resources",
        "restartPolicy",
        "restartPolicyRules",
        "securityContext",
        "startupProbe",
        "stdin",
        "stdinOnce",
        "terminationMessagePath",
        "terminationMessagePolicy",
        "tty",
        "volumeDevices",
        "volumeMounts",
        "workingDir",
    }
)
_CONTAINER_LISTS = ("initContainers", "containers")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


def unknown_pod_fields(obj: Obj) -> list[str]:
    """Drop the unknown fields of a pod's containers, as decoding does; returns their paths
    (``spec.containers[0].comand``) for the write to warn of or refuse."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return []
    unknown: list[str] = []
    for key in _CONTAINER_LISTS:
        containers = spec.get(key)
        if not isinstance(containers, list):
            continue
        for index, container in enumerate(containers):
            if not isinstance(container, dict):
                continue
            unknown += [f"spec.{key}[{index}].{k}" for k in container if k not in CONTAINER_FIELDS]
            containers[index] = {k: v for k, v in container.items() if k in CONTAINER_FIELDS}
    return unknown


def _container_causes(spec: Obj) -> list[Cause]:
    causes = []
    for key in _CONTAINER_LISTS:
        for index, container in enumerate(spec.get(key) or []):
            name = container.get("name") if isinstance(container, dict) else None
            if isinstance(name, str) and not (len(name) <= 63 and _DNS_LABEL.fullmatch(name)):
                causes.append(
                    Cause(
                        f"spec.{key}[{index}].name",
                        f"Invalid value: {json.dumps(name)}: {_DNS_LABEL_MESSAGE}",
                        "FieldValueInvalid",
                    )
                )
    return causes


def _pod_spec(spec: Obj) -> Obj:
    spec = {**_POD_DEFAULTS, **spec}
    # The ServiceAccount admission plugin runs a pod as ``default`` unless it names an account,
    # and the deprecated ``serviceAccount`` always mirrors the name.
    account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    spec["serviceAccountName"] = spec["serviceAccount"] = account
    containers = []
    for container in spec.get("containers") or []:
        image = str(container.get("image", ""))
        tag = image.rsplit("/", 1)[-1]
        latest = ":" not in tag or tag.endswith(":latest")
        containers.append(
            {
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "Always" if latest else "IfNotPresent",
                "resources": {},
                **container,
            }
        )
    spec["containers"] = containers
    return spec


def _secret(obj: Obj) -> Obj:
    string_data = obj.pop("stringData", None)
    if isinstance(string_data, dict):
        data = dict(obj.get("data") or {})
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        obj["data"] = data
    obj.setdefault("type", "Opaque")
    return obj


def prepare_create(rt: ResourceType, obj: Obj, now: str) -> list[Cause]:
    """Set what a cluster sets on a new object of this kind."""
    key = rt.key
    if rt.custom and rt.status:
        obj.pop("status", None)
    elif key == ("", "pods"):
        if not (obj.get("spec") or {}).get("containers"):
            return [Cause("spec.containers", "Required value", "FieldValueRequired")]
        causes = _container_causes(obj["spec"])
        if causes:
            return causes
        obj["spec"] = _pod_spec(obj.get("spec") or {})
        obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    elif key == ("", "namespaces"):
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}
        name = obj["metadata"]["name"]
        obj["metadata"]["labels"] = {
            **(obj["metadata"].get("labels") or {}),
            "kubernetes.io/metadata.name": name,
        }
    elif key == ("", "services"):
        spec = {"type": "ClusterIP", "sessionAffinity": "None", **(obj.get("spec") or {})}
        if spec["type"] != "ExternalName" and not spec.get("clusterIP"):
            n = next(_CLUSTER_IPS)
            spec["clusterIP"] = f"10.96.{n // 250}.{n % 250 + 1}"
            spec["clusterIPs"] = [spec["clusterIP"]]
        spec["ports"] = [
            {"protocol": "TCP", "targetPort": p.get("port"), **p} for p in spec.get("ports") or []
        ]
        obj["spec"] = spec
        obj["status"] = {"loadBalancer": {}}
    elif key == ("", "secrets"):
        _secret(obj)
    elif key in BINDINGS:
        return binding_causes(obj, None, namespaced=rt.namespaced)
    elif key == ("apiextensions.k8s.io", "customresourcedefinitions"):
        causes = check_crd(obj)
        if causes:
            return causes
        obj["status"] = crd_status(obj, _parse(now))
    return []


def prepare_update(rt: ResourceType, old: Obj, new: Obj, now: str) -> list[Cause]:
    """Re-derive what a cluster keeps consistent on a changed object of this kind."""
    key = rt.key
    if key == ("", "secrets"):
        _secret(new)
    elif key in BINDINGS:
        return binding_causes(new, old, namespaced=rt.namespaced)
    elif key == ("", "namespaces"):
        name = new["metadata"]["name"]
        new["metadata"]["labels"] = {
            **(new["metadata"].get("labels") or {}),
            "kubernetes.io/metadata.name": name,
        }
    elif key == ("apiextensions.k8s.io", "customresourcedefinitions"):
        causes = check_crd(new)
        if causes:
            return causes
        old_names = (old.get("spec") or {}).get("names", {})
        if old_names.get("plural") != new["spec"]["names"].get("plural"):
            return [Cause("spec.names.plural", "Invalid value: field is immutable")]
        new["status"] = crd_status({**new, "status": old.get("status")}, _parse(now))
    return []


def _parse(now: str) -> Any:
    from datetime import datetime

    return datetime.fromisoformat(now.replace("Z", "+00:00"))
