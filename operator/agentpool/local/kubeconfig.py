"""The kubeconfig that points kubectl, the kubernetes client and kopf at the local API server.

Plain HTTP on loopback with no credentials, one cluster, user and context named
``agentpool-local``. Written by :class:`agentpool.local.cluster.LocalCluster` into its directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

CONTEXT = "agentpool-local"


def kubeconfig_for(server: str, *, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": {"server": server}}],
        "users": [{"name": CONTEXT, "user": {}}],
        "contexts": [
            {
                "name": CONTEXT,
                "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": namespace},
            }
        ],
        "current-context": CONTEXT,
        "preferences": {},
    }


def write_kubeconfig(path: Path, server: str) -> Path:
    """Write the kubeconfig atomically (a reader never sees half a file); returns path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(yaml.safe_dump(kubeconfig_for(server), sort_keys=False))
    os.replace(partial, path)
    return path
