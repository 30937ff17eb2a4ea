"""The local cluster's credentials: a CA of its own, the API server's certificate, a token, and
the key that signs service-account tokens.

Kept under ``DIR/pki/`` and reused when they are there and still valid, so a restarted
``agentpool local up --dir DIR`` (on the same port) answers to the kubeconfig it wrote before, and
service-account tokens it issued before still authenticate. The CA signs a serving certificate
for 127.0.0.1 and localhost; the token is 32 random bytes, URL-safe; the signing key is RSA, as
kube-apiserver's ``--service-account-signing-key-file`` (``sa.key``, with ``sa.pub`` beside it, as
the test suite's real control plane keeps them). Files holding secrets are the owner's only. Used by
:class:`agentpool.local.cluster.LocalCluster` and the API server's test fixtures.
"""

from __future__ import annotations

import datetime
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from agentpool.certificates import KeyPair, issue, make_ca, make_signing_key, public_pem

CA_NAME = "ca"
SERVING_NAME = "apiserver"
TOKEN_NAME = "token"
SIGNING_NAME = "sa"
#: A certificate that expires sooner than this is issued anew rather than reused.
MARGIN = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Credentials:
    """What the API server serves with and what its clients need."""

    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    token: str
    signing_key: Path

    @property
    def signing_key_pem(self) -> bytes:
        return self.signing_key.read_bytes()

    @property
    def ca_pem(self) -> bytes:
        return self.ca_cert.read_bytes()

    @property
    def tls(self) -> tuple[Path, Path]:
        return self.serving_cert, self.serving_key


def _fresh(path: Path) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError):
        return False
    now = datetime.datetime.now(datetime.UTC)
    return cert.not_valid_after_utc - MARGIN > now


def _read(directory: Path, name: str) -> KeyPair | None:
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    if not (_fresh(cert) and key.is_file()):
        return None
    return KeyPair(cert.read_bytes(), key.read_bytes())


def _write_secret(path: Path, text: str) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)


def load_or_create(directory: Path) -> Credentials:
    """The credentials in directory, made (or remade, if missing or expiring) as needed."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = _read(directory, CA_NAME)
    serving = _read(directory, SERVING_NAME) if ca is not None else None
    if ca is None:
        ca = make_ca()
        ca.write(directory, CA_NAME)
    if serving is None:
        serving = issue(ca, "agentpool-local-apiserver")
        serving.write(directory, SERVING_NAME)
    signing = directory / f"{SIGNING_NAME}.key"
    if not signing.is_file():
        key = make_signing_key()
        _write_secret(signing, key.decode())
        (directory / f"{SIGNING_NAME}.pub").write_bytes(public_pem(key))
    token_path = directory / TOKEN_NAME
    token = token_path.read_text().strip() if token_path.is_file() else ""
    if not token:
        token = secrets.token_urlsafe(32)
        _write_secret(token_path, token + "\n")
    return Credentials(
        ca_cert=directory / f"{CA_NAME}.crt",
        serving_cert=directory / f"{SERVING_NAME}.crt",
        serving_key=directory / f"{SERVING_NAME}.key",
        token=token,
        signing_key=signing,
    )
