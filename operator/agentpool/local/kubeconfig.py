"""Kubeconfigs: the one the local cluster writes, and reading one back for the local kubelet.

The local API server speaks HTTPS with a CA of its own and takes a bearer token, as a real one
does, so its kubeconfig carries the CA (``certificate-authority-data``) and the token; one cluster,
user and context named ``agentpool-local``. :class:`ApiAccess` is what a client of either API
server needs (address, CA, token): the local kubelet takes one, read from a kubeconfig as a real
kubelet's ``--kubeconfig`` is. Written by :class:`agentpool.local.cluster.LocalCluster` into its
directory, and by the test suite's real control plane.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CONTEXT = "agentpool-local"


@dataclass(frozen=True)
class ApiAccess:
    """How to reach one API server: its URL, the CA that signed its certificate (PEM, or None
    for plain HTTP) and the bearer token to send (or None)."""

    server: str
    ca_pem: bytes | None = None
    token: str | None = None

    def ssl_context(self) -> ssl.SSLContext | None:
        """A client context that trusts only the server's CA, or None for plain HTTP."""
        if not self.server.startswith("https://"):
            return None
        context = ssl.create_default_context()
        if self.ca_pem is not None:
            context = ssl.create_default_context(cadata=self.ca_pem.decode())
        return context

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    @classmethod
    def from_kubeconfig(cls, path: Path, *, context: str | None = None) -> ApiAccess:
        """The server, CA and token of a kubeconfig's context (its current one by default)."""
        config = yaml.safe_load(Path(path).read_text()) or {}
        name = context or config.get("current-context")
        contexts = {c["name"]: c["context"] for c in config.get("contexts") or []}
        if name not in contexts:
            raise ValueError(f"{path} has no context {name!r}")
        chosen = contexts[name]
        clusters = {c["name"]: c["cluster"] for c in config.get("clusters") or []}
        users = {u["name"]: u.get("user") or {} for u in config.get("users") or []}
        cluster = clusters[chosen["cluster"]]
        user = users.get(chosen.get("user", ""), {})
        ca: bytes | None = None
        if cluster.get("certificate-authority-data"):
            ca = base64.b64decode(cluster["certificate-authority-data"])
        elif cluster.get("certificate-authority"):
            ca = Path(cluster["certificate-authority"]).read_bytes()
        token = user.get("token")
        if token is None and user.get("tokenFile"):
            token = Path(user["tokenFile"]).read_text().strip()
        return cls(server=str(cluster["server"]), ca_pem=ca, token=token)


def kubeconfig_for(
    access: ApiAccess, *, namespace: str = "default", name: str = CONTEXT
) -> dict[str, Any]:
    cluster: dict[str, Any] = {"server": access.server}
    if access.ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(access.ca_pem).decode()
    user: dict[str, Any] = {"token": access.token} if access.token else {}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": user}],
        "contexts": [
            {"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}
        ],
        "current-context": name,
        "preferences": {},
    }


def write_kubeconfig(
    path: Path, access: ApiAccess, *, namespace: str = "default", name: str = CONTEXT
) -> Path:
    """Write the kubeconfig atomically (a reader never sees half a file), readable by its owner
    only since it holds a token; returns path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(kubeconfig_for(access, namespace=namespace, name=name), sort_keys=False)
    descriptor, partial = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    os.chmod(partial, 0o600)
    os.replace(partial, path)
    return path
