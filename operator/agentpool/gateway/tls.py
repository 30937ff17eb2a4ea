"""The gateway's certificate: a CA of the operator's own and a serving certificate it signs.

A client checks the gateway as it checks the API server: against a CA it was given. The
operator keeps the CA, the certificate and its key in a Secret (``kubernetes.io/tls`` with
``ca.crt``), made on first start when none is given or when the one there no longer names the
gateway's hosts or is about to expire; a Secret given by the chart (cert-manager's, say) is used
as it is. The operator reads the Secret again every few minutes and serves what it holds from the
next handshake on (:meth:`TlsMaterial.load_into`), so a renewed certificate needs no restart.
:func:`material_from` and :func:`secret_data` turn one into the other, :func:`fresh` makes new
material, :meth:`TlsMaterial.context` the server's TLS context. The operator's handlers do the
Secret's reads and writes.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agentpool import certificates

#: A managed certificate that expires sooner than this is made anew.
MARGIN = datetime.timedelta(days=30)
#: What every gateway certificate names: a client on the operator's own machine.
LOOPBACK = ("localhost", "127.0.0.1")
CERT_KEY, KEY_KEY, CA_KEY = "tls.crt", "tls.key", "ca.crt"


@dataclass(frozen=True)
class TlsMaterial:
    """The serving certificate and key, and the CA a client checks them against (PEM)."""

    cert_pem: bytes
    key_pem: bytes
    ca_pem: bytes

    def serves(self, hosts: tuple[str, ...]) -> bool:
        """Whether the certificate names every host and is not about to expire."""
        return certificates.serves(self.cert_pem, hosts, margin=MARGIN)

    def context(self) -> ssl.SSLContext:
        """A TLS server context with this certificate (TLS 1.2 at least)."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.load_into(context)
        return context

    def load_into(self, context: ssl.SSLContext) -> None:
        """Serve this certificate from ``context``'s next handshake on; connections already
        open keep the one they began with."""
        # The ssl module loads a key only from a file: one of the owner's only, gone at once.
        with tempfile.TemporaryDirectory(prefix="agentpool-gateway-") as directory:
            cert, key = Path(directory) / "tls.crt", Path(directory) / "tls.key"
            cert.write_bytes(self.cert_pem)
            descriptor = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(self.key_pem)
            context.load_cert_chain(cert, key)


def fresh(hosts: tuple[str, ...]) -> TlsMaterial:
    """A new CA and a serving certificate for ``hosts`` (and the loopback names)."""
    ca = certificates.make_ca("agentpool-gateway-ca")
    names = tuple(dict.fromkeys((*hosts, *LOOPBACK)))
    serving = certificates.issue(ca, names[0], hosts=names)
    return TlsMaterial(serving.cert_pem, serving.key_pem, ca.cert_pem)


def material_from(data: Mapping[str, str] | None) -> TlsMaterial | None:
    """The material in a Secret's ``data`` (base64 values), or None when a key is missing or
    garbled. A Secret without ``ca.crt`` (a certificate a public CA signed) is its own chain."""
    data = data or {}
    try:
        cert = base64.b64decode(data[CERT_KEY], validate=True)
        key = base64.b64decode(data[KEY_KEY], validate=True)
        ca = base64.b64decode(data[CA_KEY], validate=True) if CA_KEY in data else cert
    except (KeyError, binascii.Error, ValueError):
        return None
    return TlsMaterial(cert, key, ca)


def secret_data(material: TlsMaterial) -> dict[str, str]:
    """The Secret ``data`` that holds ``material``."""
    return {
        CERT_KEY: base64.b64encode(material.cert_pem).decode(),
        KEY_KEY: base64.b64encode(material.key_pem).decode(),
        CA_KEY: base64.b64encode(material.ca_pem).decode(),
    }
