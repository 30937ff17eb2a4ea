"""Opening the gateway with the operator, and telling every namespace with a pool where it is.

:func:`open_gateway` finds the gateway's certificate in its Secret (making a CA and a serving
certificate on first start, or when the one there no longer names the gateway's hosts, unless
the Secret was given and is not the operator's to write), starts the HTTPS server
(:mod:`agentpool.gateway.server`) with :mod:`agentpool.handlers.gateway`'s calls and reviews,
and notes what to publish; :func:`keep_certificate` reads the Secret again every few minutes
and serves what it holds from the next handshake on (renewing a managed certificate about to
expire), as the API server reloads its own. :func:`keep_published` keeps the ConfigMap
``agentpool-gateway`` (``url``, ``ca.crt``) in a namespace with a pool current, as Kubernetes
keeps ``kube-root-ca.crt``: the pool loop calls it, and it reads the ConfigMap once every few
minutes per namespace (at once after a new CA) and writes only what differs.
:mod:`agentpool.handlers.operator` opens it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from agentpool.api.gateway import CA_KEY, CONFIGMAP, DEFAULT_PORT, DEFAULT_SECRET, URL_KEY
from agentpool.gateway import tls
from agentpool.gateway.access import Access
from agentpool.gateway.server import GatewayServer
from agentpool.handlers.gateway import GatewayCalls, KubeReviewer
from agentpool.handlers.replicas import ReplicaPeers
from agentpool.handlers.runtime import GatewayPublication, Runtime
from agentpool.io.kube import Conflict, ObjectNotFound
from agentpool.pool.manifests import MANAGED_BY_LABEL

log = logging.getLogger(__name__)

_LABELS = {MANAGED_BY_LABEL: "agentpool"}


@dataclass(frozen=True)
class GatewayOptions:
    """Where the gateway listens, what it publishes, and where its certificate is kept."""

    host: str = "0.0.0.0"
    port: int = DEFAULT_PORT
    """0 takes any free port."""
    url: str | None = None
    """The URL published to clients; where it listens, as this machine reaches it, if None."""
    secret_namespace: str = ""
    """The namespace of the certificate's Secret; the operator's own ($POD_NAMESPACE) if empty,
    else ``default``."""
    secret_name: str = DEFAULT_SECRET
    manage_secret: bool = True
    """Make or renew the certificate in the Secret; False uses the Secret as given."""
    hosts: tuple[str, ...] = ()
    """DNS names or addresses the certificate names beside the URL's host and loopback."""

    @property
    def namespace(self) -> str:
        return self.secret_namespace or os.environ.get("POD_NAMESPACE") or "default"


@dataclass
class OpenGateway:
    """The gateway, listening, and the certificate it serves now."""

    server: GatewayServer
    context: ssl.SSLContext
    material: tls.TlsMaterial
    hosts: tuple[str, ...]
    # The way to the other replicas, when this operator shares the pools with them.
    peers: ReplicaPeers | None = None

    async def stop(self) -> None:
        await self.server.stop()
        if self.peers is not None:
            await self.peers.close()


async def open_gateway(runtime: Runtime, options: GatewayOptions) -> OpenGateway:
    """The gateway, listening, with what it publishes noted in ``runtime.gateway``."""
    hosts = tuple(dict.fromkeys(_hosts(options)))
    material = await _material(runtime, options, hosts)
    context = material.context()
    settings = runtime.settings.gateway
    access = Access(
        KubeReviewer(runtime),
        ttl=settings.access_seconds,
        entries=settings.access_entries,
        retry_after=settings.retry_after_seconds,
    )
    peers = None if runtime.sharing is None else ReplicaPeers(runtime)
    server = GatewayServer(
        calls=GatewayCalls(runtime),
        access=access,
        settings=settings,
        tls=context,
        ready=runtime.ready,
        peers=peers,
    )
    await server.start(options.host, options.port)
    runtime.gateway = GatewayPublication(
        url=options.url or server.url, ca_pem=material.ca_pem, own=_own_url(server.url)
    )
    log.info("gateway listening at %s, published as %s", server.url, runtime.gateway.url)
    return OpenGateway(server, context, material, hosts, peers)


async def keep_certificate(runtime: Runtime, options: GatewayOptions, gateway: OpenGateway) -> None:
    """Every ``settings.gateway.certificate_seconds``, :func:`renew_certificate`; a Secret that
    cannot be read or is garbled leaves the certificate served as it is, and is tried again."""
    while True:
        await asyncio.sleep(runtime.settings.gateway.certificate_seconds)
        try:
            await renew_certificate(runtime, options, gateway)
        except Exception as error:
            log.warning("the gateway keeps its certificate: reading it again failed: %s", error)


async def renew_certificate(
    runtime: Runtime, options: GatewayOptions, gateway: OpenGateway
) -> bool:
    """Serve what the Secret holds now (a managed certificate made anew first if it is due);
    True when that differs from what was served. A new CA is published to every namespace on
    its pools' next pass."""
    material = await _material(runtime, options, gateway.hosts)
    if material == gateway.material:
        return False
    material.load_into(gateway.context)
    gateway.material = material
    publication = runtime.gateway
    if publication is not None and publication.ca_pem != material.ca_pem:
        publication.ca_pem = material.ca_pem
        publication.checked.clear()
    log.info(
        "the gateway serves the certificate now in Secret %s/%s",
        options.namespace,
        options.secret_name,
    )
    return True


def _own_url(url: str) -> str:
    """Where the other replicas reach the gateway listening at ``url``: at this pod's address
    ($POD_IP) when it has one."""
    address = os.environ.get("POD_IP")
    if not address:
        return url
    parts = urlsplit(url)
    host = f"[{address}]" if ":" in address else address
    return f"{parts.scheme}://{host}:{parts.port}"


def _hosts(options: GatewayOptions) -> list[str]:
    hosts = list(options.hosts)
    if options.url:
        host = urlsplit(options.url).hostname
        if host:
            hosts.insert(0, host)
    return hosts or ["localhost"]


async def _material(
    runtime: Runtime, options: GatewayOptions, hosts: tuple[str, ...]
) -> tls.TlsMaterial:
    """The certificate in the Secret; a new one where the operator keeps it and the Secret's
    is missing, garbled, about to expire or names too few hosts."""
    kube, namespace, name = runtime.kube, options.namespace, options.secret_name
    wanted = (*hosts, *tls.LOOPBACK)
    for _ in range(3):  # another replica may write it at the same moment
        try:
            found = tls.material_from((await kube.read_secret(namespace, name)).get("data"))
        except ObjectNotFound:
            found = None
            if not options.manage_secret:
                raise RuntimeError(
                    f"the gateway's TLS Secret {namespace}/{name} does not exist: create it, or "
                    "let the operator make one"
                ) from None
            material = tls.fresh(hosts)
            try:
                await kube.create_secret(namespace, _secret(name, material))
            except Conflict:
                continue
            return material
        if found is None and not options.manage_secret:
            raise RuntimeError(
                f"the gateway's TLS Secret {namespace}/{name} lacks tls.crt or tls.key"
            )
        if found is not None and (found.serves(wanted) or not options.manage_secret):
            return found
        material = tls.fresh(hosts)
        await kube.patch_secret(namespace, name, tls.secret_data(material))
        return material
    raise RuntimeError(f"the gateway's TLS Secret {namespace}/{name} kept changing")


def _secret(name: str, material: tls.TlsMaterial) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": name, "labels": _LABELS},
        "data": tls.secret_data(material),
    }


async def keep_published(runtime: Runtime, namespace: str) -> None:
    """Make sure the namespace's ``agentpool-gateway`` ConfigMap names the gateway; looked at
    again only every ``settings.gateway.publish_seconds``."""
    publication = runtime.gateway
    now = time.monotonic()
    if publication is None or publication.checked.get(namespace, -1e9) > now:
        return
    publication.checked[namespace] = now + runtime.settings.gateway.publish_seconds
    data = {URL_KEY: publication.url, CA_KEY: publication.ca_pem.decode()}
    try:
        current = await runtime.kube.read_configmap(namespace, CONFIGMAP)
        exists = True
    except ObjectNotFound:
        current, exists = {}, False
    if current.get("data") == data:
        return
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": CONFIGMAP,
            "namespace": namespace,
            "labels": {MANAGED_BY_LABEL: "agentpool"},
        },
        "data": data,
    }
    try:
        await runtime.kube.apply_configmap(namespace, body, exists=exists)
    except Exception:
        publication.checked.pop(namespace, None)  # tried again on the next pass
        raise
