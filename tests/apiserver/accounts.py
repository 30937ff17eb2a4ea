"""What the identity tests share: calls made with a token of their choosing, service accounts,
the tokens the server issues for them, and tokens signed by hand.

Everything goes over HTTPS as a client would, so the same helpers serve the local API server and
a real one. Tokens signed by hand use the cluster's service-account key when the test can find
it beside the kubeconfig (``pki/sa.key``, where both the local cluster and the suite's real
control plane keep it), to make tokens no TokenRequest would issue (expired, not yet valid).
"""

from __future__ import annotations

import base64
import hashlib
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from agentpool.local.kubeconfig import ApiAccess

ISSUER = "https://kubernetes.default.svc.cluster.local"


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any


def call(
    access: ApiAccess,
    method: str,
    path: str,
    *,
    token: str | None = None,
    body: Any = None,
    headers: Iterable[tuple[str, str]] = (),
) -> Answer:
    """One request with the given bearer token (the kubeconfig's when None)."""
    context = access.ssl_context()
    assert isinstance(context, ssl.SSLContext)
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(access.server + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {token if token is not None else access.token}")
    request.add_header("Accept", "application/json")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    for name, value in headers:
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            status, text = response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        status, text = error.code, error.read().decode()
    try:
        return Answer(status, json.loads(text))
    except ValueError:
        return Answer(status, text)


def create_account(access: ApiAccess, namespace: str, name: str) -> str:
    """A new ServiceAccount; its uid."""
    answer = call(
        access,
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        body={"metadata": {"name": name}},
    )
    assert answer.status == 201, answer.body
    return str(answer.body["metadata"]["uid"])


def delete_account(access: ApiAccess, namespace: str, name: str) -> None:
    answer = call(access, "DELETE", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}")
    assert answer.status in (200, 202), answer.body


def token_request(
    access: ApiAccess, namespace: str, name: str, spec: Mapping[str, Any] | None = None
) -> Answer:
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": dict(spec or {}),
    }
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
    return call(access, "POST", path, body=body)


def issue(access: ApiAccess, namespace: str, name: str, **spec: Any) -> str:
    """A token the server issues for the account."""
    answer = token_request(access, namespace, name, spec)
    assert answer.status == 201, answer.body
    return str(answer.body["status"]["token"])


def review(access: ApiAccess, token: str, audiences: list[str] | None = None) -> dict[str, Any]:
    """The status of a TokenReview of the token."""
    spec: dict[str, Any] = {"token": token}
    if audiences:
        spec["audiences"] = audiences
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
    answer = call(access, "POST", "/apis/authentication.k8s.io/v1/tokenreviews", body=body)
    assert answer.status == 201, answer.body
    status: dict[str, Any] = answer.body["status"]
    return status


def _segment(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _decoded(segment: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(
        base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
    )
    return found


def parts(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The header and claims of a JWT, unverified."""
    header, payload, _ = token.split(".")
    return _decoded(header), _decoded(payload)


def key_id(key: rsa.RSAPrivateKey) -> str:
    der = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return _segment(hashlib.sha256(der).digest())


def sign(header: Mapping[str, Any], claims: Mapping[str, Any], key: rsa.RSAPrivateKey) -> str:
    """A compact RS256 JWT, signed by hand."""
    signing = ".".join(_segment(json.dumps(p).encode()) for p in (header, claims))
    signature = key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing}.{_segment(signature)}"
