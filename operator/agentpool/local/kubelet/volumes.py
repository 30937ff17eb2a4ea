"""A pod's volumes, written into the pod's directory for a container run from an image.

emptyDir (a directory kept across restarts), Secret, ConfigMap, downward API and projected volumes
(their sources, including the service-account token) become files under
``<pod dir>/volumes/<name>``, hostPath is the host's path itself; each of the container's
volumeMounts is then a bind of one of them (or of a subPath in it) at its mountPath, read-only
where a kubelet mounts it so. Secrets and ConfigMaps are read through ``fetch`` as
:mod:`agentpool.local.kubelet.podenv` reads them; a missing one that is not optional raises
:class:`~agentpool.local.kubelet.podenv.EnvError`, and the worker waits as for env.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from agentpool.local.kubelet import podenv
from agentpool.local.kubelet.podenv import EnvError, Fetch

#: The ConfigMap a real control plane publishes its CA in, which admission's projected
#: service-account volume mounts as ``ca.crt``.
ROOT_CA = "kube-root-ca.crt"
DEFAULT_MODE = 0o644


@dataclass(frozen=True)
class Bind:
    """A host path bound at ``target`` inside the container's root."""

    source: Path
    target: str
    read_only: bool = False


@dataclass(frozen=True)
class PodIdentity:
    """What downward-API and token sources need of the pod."""

    pod: Mapping[str, Any]
    pod_ip: str
    token: str | None
    ca_pem: bytes


async def _object_files(
    kind: str, source: Mapping[str, Any], namespace: str, fetch: Fetch, identity: PodIdentity
) -> dict[str, tuple[bytes, int | None]] | None:
    """A Secret's or ConfigMap's keys as files (``items`` choosing and renaming them); None for an
    optional one that does not exist."""
    name = str(source.get("secretName") or source.get("name") or "")
    label = "secret" if kind == "secrets" else "configmap"
    found = await fetch(kind, namespace, name)
    if found is None and kind == "configmaps" and name == ROOT_CA and identity.ca_pem:
        found = {"data": {"ca.crt": identity.ca_pem.decode()}}
    if found is None:
        if source.get("optional"):
            return None
        raise EnvError(f'{label} "{name}" not found')
    data = podenv.object_data(kind, found)
    items = source.get("items")
    if not items:
        return {key: (value.encode(), None) for key, value in data.items()}
    files: dict[str, tuple[bytes, int | None]] = {}
    for item in items:
        key = item.get("key", "")
        if key not in data:
            if source.get("optional"):
                continue
            raise EnvError(f"couldn't find key {key} in {label.capitalize()} {namespace}/{name}")
        files[item.get("path") or key] = (data[key].encode(), item.get("mode"))
    return files


def _downward_files(
    source: Mapping[str, Any], identity: PodIdentity
) -> dict[str, tuple[bytes, int | None]]:
    files: dict[str, tuple[bytes, int | None]] = {}
    for item in source.get("items") or []:
        field = (item.get("fieldRef") or {}).get("fieldPath")
        if field is None:
            raise EnvError(f"downward API item {item.get('path')}: only fieldRef is supported")
        value = podenv.field_value(field, identity.pod, identity.pod_ip)
        files[item["path"]] = (value.encode(), item.get("mode"))
    return files


async def volume_files(
    volume: Mapping[str, Any], namespace: str, fetch: Fetch, identity: PodIdentity
) -> dict[str, tuple[bytes, int | None]] | None:
    """The files of a Secret, ConfigMap, downward API or projected volume (path: content, mode);
    None for a volume that is a directory rather than files."""
    if "secret" in volume:
        return await _object_files("secrets", volume["secret"], namespace, fetch, identity) or {}
    if "configMap" in volume:
        return (
            await _object_files("configmaps", volume["configMap"], namespace, fetch, identity) or {}
        )
    if "downwardAPI" in volume:
        return _downward_files(volume["downwardAPI"], identity)
    if "projected" not in volume:
        return None
    files: dict[str, tuple[bytes, int | None]] = {}
    for source in volume["projected"].get("sources") or []:
        if "secret" in source:
            files.update(
                await _object_files("secrets", source["secret"], namespace, fetch, identity) or {}
            )
        elif "configMap" in source:
            found = await _object_files(
                "configmaps", source["configMap"], namespace, fetch, identity
            )
            files.update(found or {})
        elif "downwardAPI" in source:
            files.update(_downward_files(source["downwardAPI"], identity))
        elif "serviceAccountToken" in source:
            if identity.token is None:
                raise EnvError("no service-account token for the projected volume")
            path = source["serviceAccountToken"].get("path") or "token"
            files[path] = (identity.token.encode(), None)
    return files


def _write(directory: Path, files: Mapping[str, tuple[bytes, int | None]], mode: int) -> None:
    """The volume's files, afresh (a restarted container sees its sources' current values)."""
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    directory.chmod(0o755)
    for relative, (content, own_mode) in files.items():
        path = directory / relative
        if not path.resolve().is_relative_to(directory.resolve()):
            raise EnvError(f"volume file {relative!r} leaves its volume")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        path.chmod(own_mode if own_mode is not None else mode)


async def prepare(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    pod_dir: Path,
    fetch: Fetch,
    identity: PodIdentity,
) -> list[Bind]:
    """Write the volumes the container mounts; the binds of its volumeMounts."""
    namespace = (pod.get("metadata") or {}).get("namespace", "default")
    volumes = {v.get("name"): v for v in (pod.get("spec") or {}).get("volumes") or []}
    sources: dict[str, tuple[Path, bool]] = {}
    binds = []
    for mount in container.get("volumeMounts") or []:
        name = mount.get("name")
        volume = volumes.get(name)
        if volume is None:
            raise EnvError(f"volumeMount {name!r}: the pod has no such volume")
        if name not in sources:
            sources[name] = await _materialise(volume, pod_dir, namespace, fetch, identity)
        source, read_only = sources[name]
        sub = str(mount.get("subPath") or "")
        if sub:
            source = _sub_path(source, sub, str(name))
        binds.append(
            Bind(source, str(mount["mountPath"]), read_only or bool(mount.get("readOnly")))
        )
    return binds


def _sub_path(volume: Path, sub: str, name: str) -> Path:
    """The directory or file a mount's subPath names inside its volume, made as a kubelet makes
    it when absent. A subPath that is absolute or climbs with ``..`` is refused, as the API server
    refuses it, and so is one that leaves the volume through a symlink, as a kubelet refuses it:
    the path is bound into a container that may run as root."""
    relative = PurePosixPath(sub)
    if relative.is_absolute() or ".." in relative.parts:
        raise EnvError(
            f"volumeMount {name!r}: subPath {sub!r} must be a relative path without '..'"
        )
    root = volume.resolve()
    source = volume.joinpath(*relative.parts)
    if not source.resolve().is_relative_to(root):
        raise EnvError(f"volumeMount {name!r}: subPath {sub!r} leads outside its volume")
    if not source.exists():
        source.mkdir(parents=True, exist_ok=True)
        # A symlink swapped in while the directories were made is caught here.
        if not source.resolve().is_relative_to(root):
            raise EnvError(f"volumeMount {name!r}: subPath {sub!r} leads outside its volume")
    return source


async def _materialise(
    volume: Mapping[str, Any], pod_dir: Path, namespace: str, fetch: Fetch, identity: PodIdentity
) -> tuple[Path, bool]:
    name = str(volume.get("name"))
    directory = pod_dir / "volumes" / name
    if "emptyDir" in volume:
        directory.mkdir(parents=True, exist_ok=True)
        # As a kubelet makes it: writable by whichever user the container runs as.
        os.chmod(directory, 0o777)
        return directory, False
    if "hostPath" in volume:
        return Path(volume["hostPath"]["path"]), False
    files = await volume_files(volume, namespace, fetch, identity)
    if files is None:
        kinds = sorted(set(volume) - {"name"})
        raise EnvError(f"volume {name!r}: the local kubelet cannot mount {kinds}")
    body = next(v for k, v in volume.items() if k != "name") or {}
    mode = int(body.get("defaultMode") or DEFAULT_MODE)
    _write(directory, files, mode)
    return directory, True
