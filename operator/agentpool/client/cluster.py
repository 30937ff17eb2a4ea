"""The client's one way to the Kubernetes API: lightkube, for the three kinds and two core ones.

Everything else in :mod:`agentpool.client` receives plain values from here: objects as the dicts
the API server sent, a Secret's value as text, a ConfigMap's data. lightkube's errors become the
client's own (:class:`~agentpool.client.errors.NotFound`,
:class:`~agentpool.client.errors.AgentpoolError` with the API server's reason and message), so
no caller needs to know which library is underneath. :class:`Cluster` finds the API server as
kubectl does: a kubeconfig and context, or the pod's service account.
"""

from __future__ import annotations

import base64
import contextlib
import os
from collections.abc import AsyncGenerator, Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import httpx2
import lightkube
from lightkube.config.client_adapter import user_auth
from lightkube.generic_resource import GenericNamespacedResource, create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Secret
from lightkube.types import OnErrorAction, OnErrorResult, PatchType

from agentpool import GROUP, VERSION
from agentpool.api.raw import RawBody, raw_body
from agentpool.client.errors import API_ERROR, NO_CLUSTER, AgentpoolError, NotFound
from agentpool.client.settings import ClientSettings

#: The three kinds, by their plural, as lightkube's generic resources.
KINDS: Final[dict[str, type[GenericNamespacedResource]]] = {
    "agentpools": create_namespaced_resource(GROUP, VERSION, "AgentPool", "agentpools"),
    "poolruns": create_namespaced_resource(GROUP, VERSION, "PoolRun", "poolruns"),
    "agentleases": create_namespaced_resource(GROUP, VERSION, "AgentLease", "agentleases"),
}
_KIND_NAMES: Final = {"agentpools": "AgentPool", "poolruns": "PoolRun", "agentleases": "AgentLease"}
_DEFAULT_KUBECONFIG: Final = Path("~/.kube/config")


def _kubeconfig_path(path: str | os.PathLike[str] | None) -> Path:
    """The kubeconfig to read: the one given, else the first in $KUBECONFIG, else kubectl's."""
    if path is not None:
        return Path(path).expanduser()
    configured = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    return Path(configured).expanduser() if configured else _DEFAULT_KUBECONFIG.expanduser()


def _plain(obj: Any) -> RawBody:
    """An object lightkube decoded, as the dict the API server sent."""
    return raw_body(obj.to_dict())


@contextlib.contextmanager
def _answered(what: str) -> Iterator[None]:
    """Turn lightkube's and the transport's errors into the client's, saying ``what`` failed."""
    try:
        yield
    except lightkube.ApiError as error:
        code = error.status.code
        reason = error.status.reason or API_ERROR
        message = f"{what}: {error.status.message or f'HTTP {code}'}"
        if code == 404:
            raise NotFound(reason, message) from None
        raise AgentpoolError(reason, message) from None
    except httpx2.TransportError as error:
        raise AgentpoolError(API_ERROR, f"{what}: cannot reach the API server: {error}") from None


class Cluster:
    """The API calls the client makes, in one namespace."""

    def __init__(
        self,
        kube: lightkube.AsyncClient,
        *,
        namespace: str,
        settings: ClientSettings,
        auth: httpx2.Auth | None = None,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.settings = settings
        self._auth = auth

    @classmethod
    def from_config(
        cls,
        config: lightkube.KubeConfig | lightkube.SingleConfig,
        *,
        namespace: str | None,
        settings: ClientSettings,
    ) -> Cluster:
        kube = lightkube.AsyncClient(config, namespace=namespace, field_manager="agentpool-client")
        single = config.get() if isinstance(config, lightkube.KubeConfig) else config
        # The same credentials lightkube presents to the API server: a token, a token file
        # (re-read once refused, as projected tokens rotate) or an exec plugin.
        auth = user_auth(single.user) if single is not None else None
        return cls(kube, namespace=namespace or str(kube.namespace), settings=settings, auth=auth)

    @classmethod
    def from_kubeconfig(
        cls,
        path: str | os.PathLike[str] | None,
        context: str | None,
        *,
        namespace: str | None,
        settings: ClientSettings,
    ) -> Cluster:
        """The cluster of a kubeconfig's context (its current one unless named); the namespace
        is the context's unless one is given."""
        file = _kubeconfig_path(path)
        try:
            config = lightkube.KubeConfig.from_file(file).get(context_name=context)
        except lightkube.ConfigError as error:
            raise AgentpoolError(NO_CLUSTER, f"no usable kubeconfig at {file}: {error}") from None
        if config is None:
            raise AgentpoolError(NO_CLUSTER, f"the kubeconfig at {file} has no current context")
        return cls.from_config(config, namespace=namespace, settings=settings)

    @classmethod
    def in_cluster(cls, *, namespace: str | None, settings: ClientSettings) -> Cluster:
        """The cluster this pod runs in, through its service account."""
        try:
            config = lightkube.KubeConfig.from_service_account()
        except (lightkube.ConfigError, KeyError) as error:
            raise AgentpoolError(
                NO_CLUSTER, f"not in a pod with a service account token: {error}"
            ) from None
        return cls.from_config(config, namespace=namespace, settings=settings)

    async def close(self) -> None:
        await self.kube.close()

    async def bearer(self, *, refused: str | None = None) -> str | None:
        """The ``Authorization`` header the kubeconfig's user sends (``Bearer ...``), None when
        its credentials are no bearer token (a client certificate, say). Given the header just
        ``refused``, a fresh one where the credentials can give one (a token file re-read, an
        exec plugin run again)."""
        if self._auth is None:
            return None
        flow = self._auth.async_auth_flow(httpx2.Request("POST", "https://gateway.invalid/"))
        try:
            sent = await anext(flow)
            if refused is not None and sent.headers.get("Authorization") == refused:
                with contextlib.suppress(StopAsyncIteration):
                    sent = await flow.asend(httpx2.Response(401, request=sent))
        except lightkube.ConfigError as error:
            raise AgentpoolError(NO_CLUSTER, f"the kubeconfig's credentials: {error}") from None
        finally:
            await flow.aclose()
        header = sent.headers.get("Authorization")
        return header if header and header.lower().startswith("bearer ") else None

    async def create(
        self, plural: str, spec: Mapping[str, Any], *, name: str | None, generate_name: str
    ) -> RawBody:
        """Create an object of ``plural`` with ``spec``, named ``name`` or by the API server
        from ``generate_name``; the object as stored."""
        resource = KINDS[plural]
        metadata = ObjectMeta(
            name=name, generateName=None if name else generate_name, namespace=self.namespace
        )
        body = resource(
            apiVersion=f"{GROUP}/{VERSION}",
            kind=_KIND_NAMES[plural],
            metadata=metadata,
            spec=dict(spec),
        )
        with _answered(f"cannot create a {_KIND_NAMES[plural]} in {self.namespace}"):
            created = await self.kube.create(body)
        return _plain(created)

    async def get(self, plural: str, name: str) -> RawBody:
        with _answered(f"{_KIND_NAMES[plural]} {self.namespace}/{name}"):
            found = await self.kube.get(KINDS[plural], name, namespace=self.namespace)
        return _plain(found)

    async def patch_spec(self, plural: str, name: str, spec: Mapping[str, Any]) -> RawBody:
        """Merge ``spec`` into the object's spec; the object as stored after."""
        with _answered(f"cannot update {_KIND_NAMES[plural]} {self.namespace}/{name}"):
            patched = await self.kube.patch(
                KINDS[plural],
                name,
                {"spec": dict(spec)},
                namespace=self.namespace,
                patch_type=PatchType.MERGE,
            )
        return _plain(patched)

    async def delete(self, plural: str, name: str) -> None:
        """Delete the object; one already gone is no error."""
        with contextlib.suppress(NotFound), _answered(f"cannot delete {plural}/{name}"):
            await self.kube.delete(KINDS[plural], name, namespace=self.namespace)

    async def watch(
        self, plural: str, name: str, *, version: str | None
    ) -> AsyncGenerator[tuple[str, RawBody], None]:
        """Each change of one object after ``version``, as (ADDED | MODIFIED | DELETED, object).

        A dropped watch is taken up again from the last version seen (from the object's current
        state when that version is gone); ``settings.watch_retries`` failures in a row raise.
        """
        settings = self.settings

        def on_error(_error: Exception, count: int) -> OnErrorResult:
            if count > settings.watch_retries:
                return OnErrorResult(OnErrorAction.RAISE)
            return OnErrorResult(OnErrorAction.RETRY, sleep=settings.watch_retry_seconds)

        events = self.kube.watch(
            KINDS[plural],
            namespace=self.namespace,
            fields={"metadata.name": name},
            resource_version=version,
            on_error=on_error,
        )
        with _answered(f"cannot watch {plural}/{name}"):
            try:
                async for kind, obj in events:
                    yield kind, _plain(obj)
            finally:
                await events.aclose()  # type: ignore[attr-defined]

    async def secret_value(self, name: str, key: str) -> str:
        """The text under ``key`` of the Secret ``name``."""
        with _answered(f"Secret {self.namespace}/{name}"):
            secret = await self.kube.get(Secret, name, namespace=self.namespace)
        value = (secret.data or {}).get(key)
        if value is None:
            raise NotFound(API_ERROR, f"Secret {self.namespace}/{name} has no key {key!r}")
        return base64.b64decode(value).decode()

    async def configmap_data(self, name: str) -> dict[str, str]:
        """The data of the ConfigMap ``name``."""
        with _answered(f"ConfigMap {self.namespace}/{name}"):
            configmap = await self.kube.get(ConfigMap, name, namespace=self.namespace)
        return dict(configmap.data or {})
