"""The gateway serves the certificate its Secret holds now: one renewed there (by cert-manager,
say) from the next handshake on, a managed one about to expire made anew, and a Secret that turns
unreadable leaves the one served as it is. Each namespace's ConfigMap follows a new CA without
waiting for its next check."""

from __future__ import annotations

import asyncio
import base64
import ssl
from typing import Any

import pytest

from agentpool import certificates
from agentpool.api.gateway import CA_KEY, CONFIGMAP
from agentpool.gateway import tls
from agentpool.handlers.gatewaysetup import (
    GatewayOptions,
    OpenGateway,
    keep_published,
    open_gateway,
    renew_certificate,
)
from agentpool.handlers.runtime import Runtime
from agentpool.io.kube import ObjectNotFound

NAMESPACE = "system"


class Kube:
    """The Secrets and ConfigMaps the gateway reads and writes, by (namespace, name)."""

    def __init__(self) -> None:
        self.secrets: dict[tuple[str, str], dict[str, Any]] = {}
        self.configmaps: dict[tuple[str, str], dict[str, Any]] = {}

    async def read_secret(self, namespace: str, name: str) -> dict[str, Any]:
        if (namespace, name) not in self.secrets:
            raise ObjectNotFound(name)
        return self.secrets[namespace, name]

    async def create_secret(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self.secrets[namespace, body["metadata"]["name"]] = body
        return body

    async def patch_secret(self, namespace: str, name: str, data: dict[str, str]) -> None:
        self.secrets[namespace, name]["data"].update(data)

    async def read_configmap(self, namespace: str, name: str) -> dict[str, Any]:
        if (namespace, name) not in self.configmaps:
            raise ObjectNotFound(name)
        return self.configmaps[namespace, name]

    async def apply_configmap(
        self, namespace: str, body: dict[str, Any], *, exists: bool = False
    ) -> None:
        self.configmaps[namespace, body["metadata"]["name"]] = body

    def material(self, options: GatewayOptions) -> tls.TlsMaterial | None:
        return tls.material_from(self.secrets[options.namespace, options.secret_name]["data"])


async def handshake(port: int, ca_pem: bytes) -> None:
    """A client's TLS handshake with the gateway, checking it against ``ca_pem``."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    _, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname="localhost"
    )
    writer.close()
    await writer.wait_closed()


async def opened(kube: Kube, options: GatewayOptions) -> tuple[Runtime, OpenGateway]:
    runtime = Runtime(kube, agents=None)  # type: ignore[arg-type]
    return runtime, await open_gateway(runtime, options)


async def test_a_certificate_renewed_in_its_secret_is_served_from_the_next_handshake() -> None:
    kube = Kube()
    options = GatewayOptions(host="127.0.0.1", port=0, secret_namespace=NAMESPACE)
    runtime, gateway = await opened(kube, options)
    try:
        first = gateway.material
        await handshake(gateway.server.port, first.ca_pem)
        await keep_published(runtime, "team")
        assert not await renew_certificate(runtime, options, gateway)

        renewed = tls.fresh(("localhost",))
        kube.secrets[NAMESPACE, options.secret_name]["data"] = tls.secret_data(renewed)
        assert await renew_certificate(runtime, options, gateway)

        await handshake(gateway.server.port, renewed.ca_pem)
        with pytest.raises(ssl.SSLCertVerificationError):
            await handshake(gateway.server.port, first.ca_pem)
        # The namespace learns the new CA on its pool's next pass, not minutes later.
        await keep_published(runtime, "team")
        published = kube.configmaps["team", CONFIGMAP]["data"][CA_KEY]
        assert published == renewed.ca_pem.decode()
    finally:
        await gateway.server.stop()


async def test_a_managed_certificate_about_to_expire_is_made_anew(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kube = Kube()
    options = GatewayOptions(host="127.0.0.1", port=0, secret_namespace=NAMESPACE)
    with monkeypatch.context() as short:
        short.setattr(certificates, "VALIDITY", tls.MARGIN / 2)
        runtime, gateway = await opened(kube, options)
    try:
        expiring = gateway.material
        assert not expiring.serves(("localhost",))
        assert await renew_certificate(runtime, options, gateway)

        stored = kube.material(options)
        assert stored is not None
        assert stored != expiring
        assert stored.serves(("localhost", "127.0.0.1"))
        await handshake(gateway.server.port, stored.ca_pem)
    finally:
        await gateway.server.stop()


async def test_a_given_secret_that_turns_unreadable_leaves_the_certificate_served() -> None:
    kube = Kube()
    given = tls.fresh(("localhost",))
    secret = {"metadata": {"name": "given"}, "data": tls.secret_data(given)}
    kube.secrets[NAMESPACE, "given"] = secret
    options = GatewayOptions(
        host="127.0.0.1",
        port=0,
        secret_namespace=NAMESPACE,
        secret_name="given",
        manage_secret=False,
    )
    runtime, gateway = await opened(kube, options)
    try:
        secret["data"] = {"tls.crt": base64.b64encode(b"garbled").decode()}
        with pytest.raises(RuntimeError, match=r"lacks tls\.crt or tls\.key"):
            await renew_certificate(runtime, options, gateway)
        # Not the operator's to write: left as it is, and the certificate served is unchanged.
        assert set(secret["data"]) == {"tls.crt"}
        await handshake(gateway.server.port, given.ca_pem)
    finally:
        await gateway.server.stop()
