"""A container's volumeMounts become binds of paths inside the pod's volumes, never outside them.

A real API server refuses a subPath that is absolute or climbs with ``..``, and a real kubelet
refuses one that reaches out of its volume through a symlink; the local kubelet, which binds the
path into a container running as root, must refuse all three too, with an error that names the
mount.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentpool.local.kubelet import volumes
from agentpool.local.kubelet.podenv import EnvError


async def _no_objects(kind: str, namespace: str, name: str) -> None:
    return None


def _prepare(pod_dir: Path, sub_path: str) -> list[volumes.Bind]:
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"volumes": [{"name": "scratch", "emptyDir": {}}]},
    }
    container = {"volumeMounts": [{"name": "scratch", "mountPath": "/work", "subPath": sub_path}]}
    identity = volumes.PodIdentity(pod=pod, pod_ip="127.0.0.1", token=None, ca_pem=b"")
    return asyncio.run(
        volumes.prepare(pod, container, pod_dir=pod_dir, fetch=_no_objects, identity=identity)
    )


def test_a_sub_path_binds_a_directory_made_inside_its_volume(tmp_path: Path) -> None:
    (bind,) = _prepare(tmp_path, "cache/models")
    assert bind.source == tmp_path / "volumes" / "scratch" / "cache" / "models"
    assert bind.source.is_dir()
    assert bind.target == "/work"


@pytest.mark.parametrize("sub_path", ["/etc", "../../etc", "a/../../..", ".."])
def test_a_sub_path_that_is_absolute_or_climbs_is_refused(tmp_path: Path, sub_path: str) -> None:
    with pytest.raises(EnvError, match="subPath") as refused:
        _prepare(tmp_path, sub_path)
    assert "scratch" in str(refused.value)
    assert not (tmp_path / "etc").exists()


def test_a_sub_path_through_a_symlink_out_of_its_volume_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    scratch = tmp_path / "pod" / "volumes" / "scratch"
    scratch.mkdir(parents=True)
    (scratch / "escape").symlink_to(outside)
    with pytest.raises(EnvError, match="outside its volume"):
        _prepare(tmp_path / "pod", "escape")
    with pytest.raises(EnvError, match="outside its volume"):
        _prepare(tmp_path / "pod", "escape/deeper")
    assert not (outside / "deeper").exists()
