"""The one module through which the operator talks to the Kubernetes API.

It wraps the official ``kubernetes`` client, whose calls block, and runs each call in a worker
thread so the operator's event loop never stalls. Everything it returns is a plain dict in wire
form (camelCase), so the rest of the operator deals in values, not client objects. It also counts
the writes it makes, by verb and resource, for the operator's metrics.

kopf does its own watching and its own bookkeeping patches; this module covers the calls the
operator makes on its own behalf: pods, the per-pool token Secret, ConfigMaps for run sources and
results, and status patches of the three custom resources.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import kubernetes
from kubernetes.client.exceptions import ApiException

from agentpool import GROUP, VERSION, metrics

T = TypeVar("T")

MERGE_PATCH = "application/merge-patch+json"
#: (connect, read) seconds for every call: a request the API server never answers fails and is
#: retried by its caller, instead of holding one of the few worker threads for good.
TIMEOUT = (5.0, 60.0)


class NotFound(Exception):
    """The object asked for does not exist."""


class Conflict(Exception):
    """The object already exists, or changed since it was read."""


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
    configuration = kubernetes.client.Configuration()
    loader: Any = kubernetes.config
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
    configuration.connection_pool_maxsize = 32
    return kubernetes.client.ApiClient(configuration)


def _override(configuration: Any, connection: Connection) -> None:
    """What the connection gives explicitly wins over what the kubeconfig says."""
    if connection.server:
        configuration.host = connection.server
    if connection.ca_path:
        configuration.ssl_ca_cert = connection.ca_path
    if connection.token:
        # The key and form the kubeconfig loader uses, so ``credentials`` reads both alike.
        configuration.api_key = {"authorization": f"Bearer {connection.token}"}


class Kube:
    """Async access to the resources the operator reads and writes."""

    def __init__(self, api_client: Any) -> None:
        # The client's generated methods are loosely typed; the boundary is kept to this class.
        self._client: Any = api_client
        self._core: Any = kubernetes.client.CoreV1Api(api_client)
        self._custom: Any = kubernetes.client.CustomObjectsApi(api_client)
        self.writes: collections.Counter[tuple[str, str]] = collections.Counter()

    @classmethod
    def connect(cls, connection: Connection) -> Kube:
        return cls(make_api_client(connection))

    def close(self) -> None:
        self._client.close()

    async def _call(self, verb: str, resource: str, fn: Callable[[], T]) -> T:
        if verb not in ("get", "list"):
            self.writes[verb, resource] += 1
            metrics.API_WRITES.labels(verb, resource).inc()
        try:
            return await asyncio.to_thread(fn)
        except ApiException as error:
            if error.status == 404:
                raise NotFound(f"{resource}: {error.reason}") from None
            if error.status == 409:
                raise Conflict(f"{resource}: {error.reason}") from None
            raise

    @staticmethod
    def _unread(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[[], None]:
        """``call`` for a write whose answer nobody reads: the object the API server sends back
        is drained as bytes, not decoded into models (for a run's status or a result ConfigMap
        that is hundreds of KiB, and the decoding would hold the event loop's lock)."""

        def write() -> None:
            response = call(*args, _preload_content=False, _request_timeout=TIMEOUT, **kwargs)
            try:
                response.read()
            finally:
                response.release_conn()

        return write

    def _plain(self, obj: Any) -> dict[str, Any]:
        result: dict[str, Any] = self._client.sanitize_for_serialization(obj)
        return result

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        accept: str = "application/json",
        content_type: str = "application/json",
    ) -> Any:
        """A raw call for what the typed APIs do not cover (Table output, any manifest)."""
        resource = path.rstrip("/").split("/")[-1]

        def call() -> Any:
            method_, url, headers, body_, _post = self._client.param_serialize(
                method,
                path,
                header_params={"Accept": accept, "Content-Type": content_type},
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self._client.call_api(
                method_, url, header_params=headers, body=body_, _request_timeout=TIMEOUT
            )
            response.read()
            if response.status >= 400:
                raise ApiException(http_resp=response)
            return json.loads(response.data or b"null")

        verb = {"GET": "get", "POST": "create", "PATCH": "patch", "DELETE": "delete"}.get(
            method, method.lower()
        )
        return await self._call(verb, resource, call)

    async def create_manifest(self, manifest: dict[str, Any], namespace: str) -> dict[str, Any]:
        """Create any namespaced object from its manifest, as ``kubectl create -f`` would."""
        api_version = manifest["apiVersion"]
        plural = manifest["kind"].lower() + "s"
        prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        created: dict[str, Any] = await self.request(
            "POST", f"{prefix}/namespaces/{namespace}/{plural}", body=manifest
        )
        return created

    # Pods -----------------------------------------------------------------------------------

    async def create_pod(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        pod = await self._call(
            "create",
            "pods",
            lambda: self._core.create_namespaced_pod(namespace, body, _request_timeout=TIMEOUT),
        )
        return self._plain(pod)

    async def delete_pod(self, namespace: str, name: str) -> None:
        """Delete a pod; one already gone is not an error."""
        with contextlib.suppress(NotFound):
            await self._call(
                "delete",
                "pods",
                lambda: self._core.delete_namespaced_pod(name, namespace, _request_timeout=TIMEOUT),
            )

    # Secrets and ConfigMaps -----------------------------------------------------------------

    async def read_secret(self, namespace: str, name: str) -> dict[str, Any]:
        secret = await self._call(
            "get",
            "secrets",
            lambda: self._core.read_namespaced_secret(name, namespace, _request_timeout=TIMEOUT),
        )
        return self._plain(secret)

    async def create_secret(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        secret = await self._call(
            "create",
            "secrets",
            lambda: self._core.create_namespaced_secret(namespace, body, _request_timeout=TIMEOUT),
        )
        return self._plain(secret)

    async def read_configmap(self, namespace: str, name: str) -> dict[str, Any]:
        configmap = await self._call(
            "get",
            "configmaps",
            lambda: self._core.read_namespaced_config_map(
                name, namespace, _request_timeout=TIMEOUT
            ),
        )
        return self._plain(configmap)

    async def apply_configmap(
        self, namespace: str, body: dict[str, Any], *, exists: bool = False
    ) -> None:
        """Create the ConfigMap, or replace its data if it exists.

        ``exists`` says the caller made it before: its data is patched at once, saving the
        create that would fail.
        """
        name = body["metadata"]["name"]
        data = {"data": body.get("data", {})}

        async def patch() -> None:
            await self._call(
                "patch",
                "configmaps",
                self._unread(self._core.patch_namespaced_config_map, name, namespace, data),
            )

        if exists:
            try:
                await patch()
                return
            except NotFound:
                pass
        try:
            await self._call(
                "create",
                "configmaps",
                self._unread(self._core.create_namespaced_config_map, namespace, body),
            )
        except Conflict:
            await patch()

    # Custom resources -----------------------------------------------------------------------

    async def get_custom(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        obj: dict[str, Any] = await self._call(
            "get",
            plural,
            lambda: self._custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, plural, name, _request_timeout=TIMEOUT
            ),
        )
        return obj

    async def list_custom(self, plural: str, namespace: str) -> list[dict[str, Any]]:
        listed: dict[str, Any] = await self._call(
            "list",
            plural,
            lambda: self._custom.list_namespaced_custom_object(
                GROUP, VERSION, namespace, plural, _request_timeout=TIMEOUT
            ),
        )
        return list(listed.get("items") or [])

    async def patch_status(
        self, plural: str, namespace: str, name: str, status: dict[str, Any]
    ) -> None:
        """Merge-patch the status subresource of a custom object."""
        await self._call(
            "patch",
            f"{plural}/status",
            self._unread(
                self._custom.patch_namespaced_custom_object_status,
                GROUP,
                VERSION,
                namespace,
                plural,
                name,
                {"status": status},
                _content_type=MERGE_PATCH,
            ),
        )

    async def delete_custom(self, plural: str, namespace: str, name: str) -> None:
        with contextlib.suppress(NotFound):
            await self._call(
                "delete",
                plural,
                lambda: self._custom.delete_namespaced_custom_object(
                    GROUP, VERSION, namespace, plural, name, _request_timeout=TIMEOUT
                ),
            )


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
