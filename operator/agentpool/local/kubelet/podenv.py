"""A container's environment and argv, resolved as a kubelet resolves them.

Handles ``env`` (plain values, ``$(VAR)`` references, ``valueFrom`` secretKeyRef, configMapKeyRef
and fieldRef), ``envFrom`` (configMapRef, secretRef) and the ``$(VAR)`` expansion of command and
args. Secrets and ConfigMaps are read through a ``fetch`` callable so this module does no I/O of its
own. Called by :mod:`agentpool.local.kubelet` before each start of a container.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

# fetch(kind, namespace, name) -> the object, or None when it does not exist.
Fetch = Callable[[str, str, str], Awaitable[Mapping[str, Any] | None]]

_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class EnvError(Exception):
    """A required Secret, ConfigMap, key or field is missing: CreateContainerConfigError."""


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: known names are replaced, ``$$`` escapes, others stay."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return _REFERENCE.sub(replace, text)


def field_value(path: str, pod: Mapping[str, Any], pod_ip: str) -> str:
    """The value of a downward-API fieldRef."""
    metadata = pod.get("metadata") or {}
    simple = {
        "metadata.name": metadata.get("name", ""),
        "metadata.namespace": metadata.get("namespace", "default"),
        "metadata.uid": metadata.get("uid", ""),
        "spec.nodeName": "local",
        "spec.serviceAccountName": (pod.get("spec") or {}).get("serviceAccountName", "default"),
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": "127.0.0.1",
        "status.hostIPs": "127.0.0.1",
    }
    if path in simple:
        return str(simple[path])
    found = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if found:
        return str((metadata.get(found.group(1)) or {}).get(found.group(2), ""))
    raise EnvError(f"unsupported fieldRef fieldPath {path!r}")


def object_data(kind: str, obj: Mapping[str, Any]) -> dict[str, str]:
    if kind == "secrets":
        values = {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
        values.update(obj.get("stringData") or {})
        return values
    values = dict(obj.get("data") or {})
    values.update(
        {k: base64.b64decode(v).decode() for k, v in (obj.get("binaryData") or {}).items()}
    )
    return values


async def _key_ref(kind: str, ref: Mapping[str, Any], namespace: str, fetch: Fetch) -> str | None:
    name, key, optional = ref.get("name", ""), ref.get("key", ""), bool(ref.get("optional"))
    label = "secret" if kind == "secrets" else "configmap"
    obj = await fetch(kind, namespace, name)
    if obj is None:
        if optional:
            return None
        raise EnvError(f'{label} "{name}" not found')
    data = object_data(kind, obj)
    if key not in data:
        if optional:
            return None
        raise EnvError(f"couldn't find key {key} in {label.capitalize()} {namespace}/{name}")
    return data[key]


async def container_env(
    container: Mapping[str, Any],
    pod: Mapping[str, Any],
    *,
    base: Mapping[str, str],
    pod_ip: str,
    fetch: Fetch,
) -> dict[str, str]:
    """The full environment of the container: base, then envFrom, then env, then local extras."""
    namespace = (pod.get("metadata") or {}).get("namespace", "default")
    env = dict(base)
    env["HOSTNAME"] = (pod.get("metadata") or {}).get("name", "")
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for kind, key in (("configmaps", "configMapRef"), ("secrets", "secretRef")):
            ref = source.get(key)
            if ref is None:
                continue
            obj = await fetch(kind, namespace, ref.get("name", ""))
            if obj is None:
                if ref.get("optional"):
                    continue
                raise EnvError(f'{kind[:-1]} "{ref.get("name", "")}" not found')
            env.update({prefix + k: v for k, v in object_data(kind, obj).items()})
    for item in container.get("env") or []:
        name = item["name"]
        if "valueFrom" not in item:
            env[name] = expand(str(item.get("value", "")), env)
            continue
        source = item["valueFrom"]
        value: str | None
        if "fieldRef" in source:
            value = field_value(source["fieldRef"].get("fieldPath", ""), pod, pod_ip)
        elif "secretKeyRef" in source:
            value = await _key_ref("secrets", source["secretKeyRef"], namespace, fetch)
        elif "configMapKeyRef" in source:
            value = await _key_ref("configmaps", source["configMapKeyRef"], namespace, fetch)
        else:
            raise EnvError(f"env {name}: the local kubelet cannot resolve {sorted(source)}")
        if value is not None:
            env[name] = value
    # Every pod shares the host's network locally, so its own loopback address is the only place
    # it may listen; a template's AGENT_HOST (say 0.0.0.0) would make all agents clash on one port.
    env["AGENT_HOST"] = pod_ip
    env["POD_IP"] = pod_ip
    return env


def container_argv(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """command + args with ``$(VAR)`` expanded; empty when the container names no command."""
    command: Sequence[str] = container.get("command") or []
    args: Sequence[str] = container.get("args") or []
    if not command:
        return []
    return [expand(str(part), env) for part in [*command, *args]]


def projected_token_seconds(pod: Mapping[str, Any], container: Mapping[str, Any]) -> int | None:
    """How long a service-account token the container mounts through a projected volume is to
    last (the volume a real API server's admission adds unless automounting is off), or None when
    it mounts none."""
    mounted = {m.get("name") for m in container.get("volumeMounts") or []}
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        if volume.get("name") not in mounted:
            continue
        for source in (volume.get("projected") or {}).get("sources") or []:
            token = source.get("serviceAccountToken")
            if token is not None:
                return int(token.get("expirationSeconds") or 3600)
    return None
