"""Container env and argv resolution: plain values, references, Secrets, ConfigMaps, fieldRefs."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import pytest

from agentpool.local.kubelet import podenv

POD = {"metadata": {"name": "agent-1", "namespace": "team", "labels": {"pool": "p"}}}
OBJECTS: dict[tuple[str, str, str], Mapping[str, Any]] = {
    ("secrets", "team", "token"): {"data": {"token": base64.b64encode(b"s3cret").decode()}},
    ("configmaps", "team", "settings"): {"data": {"model": "small", "level": "debug"}},
}


async def fetch(kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
    return OBJECTS.get((kind, namespace, name))


async def test_env_sources_resolve() -> None:
    """Every env source the operator uses resolves, and AGENT_HOST/POD_IP name the pod's IP."""
    container = {
        "env": [
            {"name": "PLAIN", "value": "x"},
            {"name": "REF", "value": "$(PLAIN)-y-$$(PLAIN)"},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "token", "key": "token"}}},
            {
                "name": "MODEL",
                "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "model"}},
            },
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "LBL", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['pool']"}}},
            {"name": "AGENT_HOST", "value": "0.0.0.0"},
        ],
        "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "CFG_"}],
    }
    env = await podenv.container_env(
        container, POD, base={"PATH": "/bin"}, pod_ip="127.0.0.7", fetch=fetch
    )
    assert env["PLAIN"] == "x"
    assert env["REF"] == "x-y-$(PLAIN)"
    assert env["TOKEN"] == "s3cret"
    assert env["MODEL"] == "small"
    assert (env["NAME"], env["NS"], env["IP"], env["LBL"]) == ("agent-1", "team", "127.0.0.7", "p")
    assert env["CFG_level"] == "debug"
    assert env["AGENT_HOST"] == env["POD_IP"] == "127.0.0.7"
    assert env["PATH"] == "/bin"
    assert env["HOSTNAME"] == "agent-1"


@pytest.mark.parametrize(
    "source",
    [
        {"secretKeyRef": {"name": "missing", "key": "k"}},
        {"secretKeyRef": {"name": "token", "key": "missing"}},
        {"configMapKeyRef": {"name": "missing", "key": "k"}},
        {"fieldRef": {"fieldPath": "spec.unknown"}},
    ],
)
async def test_missing_required_reference_is_an_error(source: dict[str, Any]) -> None:
    """A missing required Secret, ConfigMap, key or field stops the start with a clear error."""
    container = {"env": [{"name": "X", "valueFrom": source}]}
    with pytest.raises(podenv.EnvError):
        await podenv.container_env(container, POD, base={}, pod_ip="127.0.0.2", fetch=fetch)


async def test_optional_reference_is_skipped() -> None:
    """optional: true leaves the variable unset instead of failing."""
    container = {
        "env": [
            {
                "name": "X",
                "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k", "optional": True}},
            }
        ]
    }
    env = await podenv.container_env(container, POD, base={}, pod_ip="127.0.0.2", fetch=fetch)
    assert "X" not in env


def test_argv_expands_references_and_needs_a_command() -> None:
    """command+args expand $(VAR); a container without a command has no local argv."""
    container = {"command": ["python", "-m", "mod"], "args": ["--port", "$(PORT)", "$(NOPE)"]}
    assert podenv.container_argv(container, {"PORT": "8080"}) == [
        "python",
        "-m",
        "mod",
        "--port",
        "8080",
        "$(NOPE)",
    ]
    assert podenv.container_argv({"args": ["x"]}, {}) == []
