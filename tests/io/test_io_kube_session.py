"""The operator's session to the API server (:meth:`Kube.open_session`) trusts and proves what the
``kubernetes`` client's own connections do: the kubeconfig's CA and nothing else, its client
certificate, its TLS server name; and a connection through a proxy keeps the client's threads.
Checked against a loopback HTTPS server that asks for a client certificate."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import kubernetes
import pytest
from aiohttp import web

from agentpool.certificates import KeyPair, issue, make_ca
from agentpool.io.connection import transport
from agentpool.io.kube import Kube
from loopback import served

STATUS = "/apis/agentpool.dev/v1alpha1/namespaces/ns/agentpools/p/status"


class Server:
    """An HTTPS server for one pool's status that notes the client certificate of each patch."""

    def __init__(self, ca: KeyPair, serving: KeyPair, directory: Path) -> None:
        self.callers: list[str] = []
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        cert, key = serving.write(directory, "serving")
        self.context.load_cert_chain(cert, key)
        self.context.verify_mode = ssl.CERT_REQUIRED
        self.context.load_verify_locations(cadata=ca.cert_pem.decode())
        self.port = 0

    async def patch(self, request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(item[0] for item in (peer or {}).get("subject", ()))
        self.callers.append(str(subject.get("commonName", "")))
        return web.json_response({"metadata": {"name": "p"}})


@pytest.fixture
def ca() -> KeyPair:
    return make_ca("test-cluster-ca")


@contextlib.asynccontextmanager
async def serve(server: Server) -> AsyncIterator[Server]:
    app = web.Application()
    app.router.add_patch(STATUS, server.patch)
    async with served(app, server.context) as server.port:
        yield server


def configuration(ca: KeyPair, server: Server, tmp_path: Path) -> kubernetes.client.Configuration:
    """A client configuration as a kubeconfig with a CA and a client certificate makes it."""
    config = kubernetes.client.Configuration()
    config.host = f"https://127.0.0.1:{server.port}"
    config.ssl_ca_cert = str(ca.write(tmp_path, "ca")[0])
    client_cert, client_key = issue(ca, "agentpool-operator", client=True).write(tmp_path, "op")
    config.cert_file, config.key_file = str(client_cert), str(client_key)
    return config


async def patched(config: kubernetes.client.Configuration) -> None:
    kube = Kube(kubernetes.client.ApiClient(config))
    await kube.open_session()
    try:
        await kube.patch_status("agentpools", "ns", "p", {"replicas": 1})
    finally:
        await kube.aclose()


async def test_the_session_proves_the_client_certificate_to_the_clusters_server(
    ca: KeyPair, tmp_path: Path
) -> None:
    async with serve(Server(ca, issue(ca, "apiserver"), tmp_path)) as server:
        await patched(configuration(ca, server, tmp_path))
        assert server.callers == ["agentpool-operator"]


async def test_a_server_another_ca_signed_is_refused(ca: KeyPair, tmp_path: Path) -> None:
    """The kubeconfig's CA is the one trusted: a server whose certificate another CA signed is
    refused before any write reaches it."""
    other = make_ca("someone-else")
    async with serve(Server(ca, issue(other, "apiserver"), tmp_path)) as server:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await patched(configuration(ca, server, tmp_path))
        assert server.callers == []


async def test_the_tls_server_name_is_the_one_checked(ca: KeyPair, tmp_path: Path) -> None:
    """A server whose certificate names only ``kubernetes.default.svc``, reached by its address,
    is accepted with that ``tls-server-name`` and refused without it."""
    serving = issue(ca, "apiserver", hosts=("kubernetes.default.svc",))
    async with serve(Server(ca, serving, tmp_path)) as server:
        config = configuration(ca, server, tmp_path)
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await patched(config)
        config.tls_server_name = "kubernetes.default.svc"
        await patched(config)
        assert server.callers == ["agentpool-operator"]


def test_a_connection_through_a_proxy_keeps_the_clients_threads() -> None:
    config = kubernetes.client.Configuration()
    config.host = "https://203.0.113.7:6443"
    config.proxy = "http://proxy.internal:3128"
    assert transport(config) is None


def test_turning_verification_off_checks_neither_chain_nor_name() -> None:
    """``insecure-skip-tls-verify``, as kubectl reads it."""
    config = kubernetes.client.Configuration()
    config.host = "https://203.0.113.7:6443"
    config.verify_ssl = False
    place = transport(config)
    assert place is not None
    assert place.ssl is not None
    assert (place.ssl.verify_mode, place.ssl.check_hostname) == (ssl.CERT_NONE, False)
