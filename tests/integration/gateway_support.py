"""What the gateway tests share: callers with ServiceAccount tokens, and HTTPS to the gateway.

A caller is a ServiceAccount of the test's namespace with a token from the TokenRequest API (what
``kubectl create token`` asks for), bound or not to a ClusterRole with the rules of the chart's
``agentpool-caller`` (``create`` on ``agentpools/call`` and ``agentpools/cast``, stated in
:mod:`agentpool.api.roles`). The gateway is found as a client finds it: from the namespace's
``agentpool-gateway`` ConfigMap, its CA checking the certificate. Requests go over the standard
library's HTTPS client, or a raw TLS socket for a caller that goes away mid-request.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes
from operator_support import Api

from agentpool.api import roles
from chart.rendering import find, render_chart
from cluster import wait_for
from docblocks import REPO, block_for

CALLER_ROLE = "agentpool-test-caller"


def ensure_caller_role(api: Api) -> None:
    """The tests' own ClusterRole a caller is bound to, with the rules of the chart's caller role
    (create on agentpools/call and agentpools/cast), made once per cluster. Its own name keeps
    the tests off the chart's ``agentpool-caller``, which a Helm install on a real cluster makes
    and owns."""
    rbac = kubernetes.client.RbacAuthorizationV1Api(api.client)
    role = {"metadata": {"name": CALLER_ROLE}, "rules": roles.caller_rules()}
    try:
        rbac.create_cluster_role(role)
    except kubernetes.client.exceptions.ApiException as error:
        if error.status != 409:
            raise


def caller_token(api: Api, namespace: str, name: str, *, bound: bool) -> str:
    """A token of a new ServiceAccount ``name``; with ``bound``, a RoleBinding named after it
    grants it the caller role in its namespace."""
    api.core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    if bound:
        bind_caller(api, namespace, name)
    request = api.core.create_namespaced_service_account_token(
        name, namespace, {"spec": {"expirationSeconds": 3600}}
    )
    return str(request.status.token)


def bind_caller(api: Api, namespace: str, name: str) -> None:
    ensure_caller_role(api)
    rbac = kubernetes.client.RbacAuthorizationV1Api(api.client)
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": CALLER_ROLE,
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    )


def unbind_caller(api: Api, namespace: str, name: str) -> None:
    kubernetes.client.RbacAuthorizationV1Api(api.client).delete_namespaced_role_binding(
        name, namespace
    )


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: Any

    @property
    def reason(self) -> str | None:
        error = self.body.get("error") if isinstance(self.body, dict) else None
        return error.get("reason") if isinstance(error, dict) else None


@dataclass(frozen=True)
class Gateway:
    """The gateway as the namespace's ConfigMap names it."""

    url: str
    ca_pem: str
    namespace: str

    @classmethod
    def of(cls, api: Api, namespace: str, timeout: float = 60) -> Gateway:
        def published() -> dict[str, str] | None:
            try:
                found = api.core.read_namespaced_config_map("agentpool-gateway", namespace)
            except kubernetes.client.exceptions.ApiException as error:
                if error.status == 404:
                    return None
                raise
            return dict(found.data or {})

        data = wait_for(published, timeout, message="the agentpool-gateway ConfigMap")
        return cls(data["url"], data["ca.crt"], namespace)

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or ""

    @property
    def port(self) -> int:
        return urlsplit(self.url).port or 443

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.ca_pem)

    def path(self, pool: str, verb: str = "call") -> str:
        return f"/v1/namespaces/{self.namespace}/agentpools/{pool}/{verb}"

    def send(
        self,
        pool: str,
        body: Any,
        *,
        token: str | None,
        verb: str = "call",
        method: str = "POST",
        raw: bytes | None = None,
        timeout: float = 120,
        path: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        """One request; ``raw`` is sent as the body as it is, else ``body`` as JSON."""
        connection = http.client.HTTPSConnection(
            self.host, self.port, context=self.context(), timeout=timeout
        )
        headers = {"Content-Type": "application/json", **(headers or {})}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        data = raw if raw is not None else json.dumps(body).encode()
        try:
            connection.request(
                method,
                path or self.path(pool, verb),
                body=data if method == "POST" else None,
                headers=headers,
            )
            response = connection.getresponse()
            payload = response.read()
        finally:
            connection.close()
        try:
            parsed = json.loads(payload)
        except ValueError:
            parsed = payload.decode(errors="replace")
        return Reply(response.status, dict(response.getheaders()), parsed)

    def call(self, pool: str, item: Any, *, token: str, **fields: Any) -> Reply:
        return self.send(pool, {"item": item, **fields}, token=token)

    def cast(self, pool: str, item: Any, *, token: str, **fields: Any) -> Reply:
        return self.send(pool, {"item": item, **fields}, token=token, verb="cast")

    def open_request(self, pool: str, body: Any, *, token: str) -> ssl.SSLSocket:
        """A request sent and left waiting for its answer: the caller closes the socket to go
        away before it comes."""
        data = json.dumps(body).encode()
        sock = socket.create_connection((self.host, self.port), timeout=30)
        tls = self.context().wrap_socket(sock, server_hostname=self.host)
        head = (
            f"POST {self.path(pool)} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n"
        )
        tls.sendall(head.encode() + data)
        return tls


@contextlib.contextmanager
def chart_caller_role(api: Api) -> Iterator[None]:
    """On a real cluster, the caller ClusterRole as the chart renders it, as ``helm install``
    makes it, unless one is there; removed after, so the Helm test can install the chart."""
    rbac = kubernetes.client.RbacAuthorizationV1Api(api.client)
    rendered = find(render_chart(), "ClusterRole")
    (role,) = [r for r in rendered if r["metadata"]["name"] == roles.CALLER_ROLE]
    try:
        rbac.create_cluster_role(role)
    except kubernetes.client.exceptions.ApiException as error:
        if error.status != 409:
            raise
        yield
        return
    try:
        yield
    finally:
        rbac.delete_cluster_role(roles.CALLER_ROLE)


def run_guide_block(
    test_id: str, gateway: Gateway, namespace: str, token: str, directory: Path
) -> None:
    """Run the python block of the "Bring your own agent" guide that ``test_id`` reads, as
    printed, with the names it leaves to the reader: the gateway's URL, the namespace, a
    caller's token and the file of the gateway's CA."""
    ca_file = directory / "ca.crt"
    ca_file.write_text(gateway.ca_pem)
    block = block_for(test_id, REPO / "docs" / "guides" / "bring-your-own-agent.md")
    names: dict[str, Any] = {
        "GATEWAY": gateway.url,
        "NAMESPACE": namespace,
        "TOKEN": token,
        "CA_FILE": str(ca_file),
    }
    exec(compile(block.text, block.where(), "exec"), names)
