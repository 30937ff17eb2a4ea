"""How the operator finds the Kubernetes API server and proves who it is, as kubectl resolves it.

A :class:`Connection` names a kubeconfig and context, the in-cluster service account, or a bare
server URL; :func:`make_api_client` turns it into the ``kubernetes`` client configuration that
:mod:`agentpool.io.kube` makes its calls with, and :func:`credentials` gives kopf's own HTTP
session the same server and credentials.
"""

from __future__ import annotations

import os
import ssl
import threading
from dataclasses import dataclass
from typing import Any

import kubernetes
from kubernetes.client.rest import should_bypass_proxies

#: API calls the operator has in flight at once at most: its worker threads and the client's
#: connections. A burst of 32 leases makes 64 writes at once; Python's default of (CPUs + 4)
#: threads would queue most of them behind each other.
CALLS_AT_ONCE = 32

#: Held while a kubeconfig loads. The ``kubernetes`` client writes a kubeconfig's CA and client
#: certificate to files it shares by content across the process, and names each file to other
#: loaders before it has written it: a second thread loading the same kubeconfig then would get
#: an empty CA file, which its TLS context refuses.
_LOADING = threading.Lock()


class NoCluster(Exception):
    """No kubeconfig or in-cluster service account says where the API server is."""


@dataclass(frozen=True)
class Connection:
    """Where the API server is and how to prove who we are, resolved as kubectl resolves it: a
    kubeconfig (``kubeconfig`` and/or ``context`` given), else the in-cluster service account,
    else the default kubeconfig; or a bare ``server`` URL. ``server``, ``ca_path`` (the CA that
    signed the server's certificate, PEM) and ``token`` (a bearer token) override what the
    kubeconfig says, as kubectl's ``--server``, ``--certificate-authority`` and ``--token`` do."""

    server: str | None = None
    context: str | None = None
    kubeconfig: str | None = None
    ca_path: str | None = None
    token: str | None = None


def make_api_client(connection: Connection) -> Any:
    """Build a client configuration for the connection, the way kubectl would resolve it."""
    try:
        configuration = _configuration(connection)
    except (kubernetes.config.ConfigException, FileNotFoundError) as error:
        where = connection.kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise NoCluster(
            f"no cluster to talk to: no usable kubeconfig at {where} and no in-cluster"
            f" service account ({str(error).strip() or type(error).__name__}); pass"
            " --kubeconfig FILE or --server URL, set KUBECONFIG, or start a local cluster"
            " with `agentpool local up --dir DIR`"
        ) from None
    return kubernetes.client.ApiClient(configuration)


def _configuration(connection: Connection) -> Any:
    configuration = kubernetes.client.Configuration()
    loader: Any = kubernetes.config
    with _LOADING:
        if connection.kubeconfig or connection.context:
            loader.load_kube_config(
                config_file=connection.kubeconfig,
                context=connection.context,
                client_configuration=configuration,
            )
        elif not connection.server:
            try:
                loader.load_incluster_config(client_configuration=configuration)
            except kubernetes.config.ConfigException:
                loader.load_kube_config(client_configuration=configuration)
    _override(configuration, connection)
    # The kubeconfig loader's hook reloads the kubeconfig before every request (to refresh
    # tokens) and so would undo the overrides: apply them again after it.
    hook = configuration.refresh_api_key_hook
    if hook is not None:

        def refresh(config: Any) -> None:
            hook(config)  # which installs itself again: keep this one in its place
            _override(config, connection)
            config.refresh_api_key_hook = refresh

        configuration.refresh_api_key_hook = refresh
    # The operator runs many calls at once from worker threads; urllib3's default pool of four
    # connections would serialise them and log warnings.
    configuration.connection_pool_maxsize = CALLS_AT_ONCE
    return configuration


def _override(configuration: Any, connection: Connection) -> None:
    """What the connection gives explicitly wins over what the kubeconfig says."""
    if connection.server:
        configuration.host = connection.server
    if connection.ca_path:
        configuration.ssl_ca_cert = connection.ca_path
    if connection.token:
        # The key and form the kubeconfig loader uses, so ``credentials`` reads both alike.
        configuration.api_key = {"authorization": f"Bearer {connection.token}"}


def credentials(connection: Connection) -> dict[str, Any]:
    """What an HTTP client needs to reach the API server the connection names.

    kopf keeps its own HTTP session; this lets it reach the same server with the same
    credentials as the rest of the operator, however the connection was given.
    """
    client = make_api_client(connection)
    config: Any = client.configuration
    header: str | None = config.get_api_key_with_prefix(
        "BearerToken"
    ) or config.get_api_key_with_prefix("authorization")
    scheme, token = None, None
    if header:
        parts = header.split(" ", 1)
        scheme, token = (None, parts[0]) if len(parts) == 1 else (parts[0], parts[1])
    result = {
        "server": config.host,
        "ca_path": config.ssl_ca_cert,
        "insecure": not config.verify_ssl,
        "scheme": scheme,
        "token": token,
        "certificate_path": config.cert_file,
        "private_key_path": config.key_file,
    }
    client.close()
    return result


@dataclass(frozen=True)
class Transport:
    """How an asyncio HTTP client reaches the API server exactly as the ``kubernetes`` client's
    own connections do: the same server, TLS checks, client certificate and server name. None
    of it covers a proxy: :func:`transport` gives no transport for a connection through one."""

    server: str
    ssl: ssl.SSLContext | None
    server_hostname: str | None


def transport(configuration: Any) -> Transport | None:
    """The TLS settings of the client ``configuration`` (as ``kubernetes.client.rest`` hands them
    to urllib3), for an aiohttp session; None when the configuration goes through a proxy (one
    ``no_proxy`` does not bypass for the server, as the client reads them)."""
    if configuration.proxy and not should_bypass_proxies(
        configuration.host, configuration.no_proxy or ""
    ):
        return None
    server = str(configuration.host)
    if not server.startswith("https://"):
        return Transport(server, None, None)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif configuration.ssl_ca_cert or configuration.ca_cert_data:
        # Only the cluster's CA, as urllib3 trusts only the CA it is given.
        context.load_verify_locations(
            cafile=configuration.ssl_ca_cert, cadata=configuration.ca_cert_data
        )
    else:
        context.load_default_certs()
    if configuration.assert_hostname is False:
        context.check_hostname = False
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file)
    return Transport(server, context, configuration.tls_server_name or None)
