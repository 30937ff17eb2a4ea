"""Authentication and TLS, as a real API server with ``--anonymous-auth=false`` has them.

Every path answers 401 with an ``Unauthorized`` Status to a request without a valid bearer
token; the ``Bearer`` scheme is case-insensitive; the server's certificate is signed by the CA
in the kubeconfig, so kubectl and the kubernetes client verify it. Runs against the local API
server and, with ``--kube-context``, against a real one whose kubeconfig carries a token.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any

import pytest

from agentpool.local.kubeconfig import ApiAccess
from conftest import Cluster, Kubectl

UNAUTHORIZED = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "Unauthorized",
    "reason": "Unauthorized",
    "code": 401,
}
PATHS = ["/healthz", "/version", "/openapi/v3", "/api", "/apis", "/api/v1/namespaces"]


@pytest.fixture(scope="module")
def access(cluster: Cluster) -> ApiAccess:
    found = cluster.access
    if not found.token:
        pytest.skip("the kubeconfig's user has no bearer token")
    return found


def _get(access: ApiAccess, path: str, authorization: str | None) -> tuple[int, Any]:
    context = access.ssl_context()
    assert isinstance(context, ssl.SSLContext), "the API server must speak HTTPS"
    request = urllib.request.Request(access.server + path, headers={"Accept": "application/json"})
    if authorization is not None:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.parametrize("path", PATHS)
def test_no_token_is_unauthorized_on_every_path(access: ApiAccess, path: str) -> None:
    assert _get(access, path, None) == (401, UNAUTHORIZED)


@pytest.mark.parametrize("path", PATHS)
def test_a_wrong_token_is_unauthorized(access: ApiAccess, path: str) -> None:
    assert _get(access, path, f"Bearer {access.token}x") == (401, UNAUTHORIZED)
    assert _get(access, path, "Bearer ") == (401, UNAUTHORIZED)
    assert _get(access, path, f"Basic {access.token}") == (401, UNAUTHORIZED)


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
def test_the_bearer_scheme_is_case_insensitive(access: ApiAccess, scheme: str) -> None:
    status, _ = _get(access, "/version", f"{scheme} {access.token}")
    assert status == 200


def test_the_certificate_is_checked_against_the_kubeconfig_ca(access: ApiAccess) -> None:
    """A client that trusts only the system CAs refuses the server's certificate."""
    request = urllib.request.Request(access.server + "/version")
    with pytest.raises(urllib.error.URLError) as caught:
        urllib.request.urlopen(request, timeout=30, context=ssl.create_default_context())
    assert isinstance(caught.value.reason, ssl.SSLCertVerificationError)


def test_kubectl_reaches_the_server_over_tls_with_the_kubeconfig(kubectl: Kubectl) -> None:
    """kubectl verifies the certificate by the kubeconfig's CA and sends its token; with a
    wrong token it reports that it must log in."""
    version = json.loads(kubectl.run("get", "--raw", "/version").stdout)
    assert version["major"]
    refused = kubectl.run("--token", "wrong", "get", "namespaces", check=False)
    assert refused.returncode != 0
    assert "You must be logged in to the server" in refused.stderr
