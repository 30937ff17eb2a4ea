"""The few Kubernetes API calls the local kubelet makes, over aiohttp.

List and watch pods with resourceVersion, bind a pod, merge-patch its status, delete it once its
processes ended, read Secrets and ConfigMaps for env and volumes, and record Events. Asynchronous
on purpose: the kubelet
shares its event loop with many pod workers (and, in tests, with the API server itself), so a
blocking client would stall them all. Only :mod:`agentpool.local.kubelet` uses it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp

from agentpool.local.kubeconfig import ApiAccess

MERGE = {"Content-Type": "application/merge-patch+json"}


class Gone(Exception):
    """The watch's resourceVersion is too old (410): list again."""


class PodApi:
    """A client of one API server for the kubelet; ``close()`` when done."""

    def __init__(self, access: ApiAccess, *, session: aiohttp.ClientSession | None = None) -> None:
        self.base_url = access.server.rstrip("/")
        context = access.ssl_context()
        self.session = session or aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            connector=aiohttp.TCPConnector(limit=32, ssl=context if context is not None else True),
            headers=access.headers(),
        )

    async def close(self) -> None:
        await self.session.close()

    def _pod_url(self, namespace: str, name: str, sub: str = "") -> str:
        url = f"{self.base_url}/api/v1/namespaces/{namespace}/pods/{name}"
        return f"{url}/{sub}" if sub else url

    async def list_pods(self) -> tuple[list[dict[str, Any]], str]:
        async with self.session.get(f"{self.base_url}/api/v1/pods") as response:
            response.raise_for_status()
            body = await response.json()
        return list(body.get("items") or []), str(body["metadata"]["resourceVersion"])

    async def watch_pods(
        self, resource_version: str, *, timeout: int = 300
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """Yield (type, pod) from resource_version until the server closes the stream."""
        params = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout),
        }
        url = f"{self.base_url}/api/v1/pods"
        async with self.session.get(url, params=params) as response:
            if response.status == 410:
                raise Gone(await response.text())
            response.raise_for_status()
            async for line in response.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, obj = event.get("type", ""), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone(obj.get("message", ""))
                    raise aiohttp.ClientError(f"watch error: {obj.get('message', obj)}")
                yield kind, obj

    async def bind(
        self,
        namespace: str,
        name: str,
        *,
        node: str,
        annotations: Mapping[str, str],
        finalizers: list[str],
    ) -> bool:
        """Set spec.nodeName, the kubelet's annotations and finalizers; False if the pod is gone."""
        metadata = {"annotations": dict(annotations), "finalizers": finalizers}
        patch = {"metadata": metadata, "spec": {"nodeName": node}}
        url = self._pod_url(namespace, name)
        async with self.session.patch(url, data=json.dumps(patch), headers=MERGE) as response:
            if response.status == 404:
                return False
            if response.status != 422:
                response.raise_for_status()
                return True
        # A server that guards spec.nodeName like a real one takes the binding subresource.
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        async with self.session.post(self._pod_url(namespace, name, "binding"), json=binding) as r:
            if r.status == 404:
                return False
            r.raise_for_status()
        patch = {"metadata": metadata}
        async with self.session.patch(url, data=json.dumps(patch), headers=MERGE) as response:
            return response.status != 404

    async def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> bool:
        """Merge-patch the pod's status; False when the pod is gone."""
        url = self._pod_url(namespace, name, "status")
        body = json.dumps({"status": status})
        async with self.session.patch(url, data=body, headers=MERGE) as response:
            if response.status == 404:
                return False
            response.raise_for_status()
            return True

    async def set_finalizers(self, namespace: str, name: str, finalizers: list[str]) -> None:
        """Replace the pod's finalizers (a merge patch replaces the whole list)."""
        patch = json.dumps({"metadata": {"finalizers": finalizers}})
        async with self.session.patch(
            self._pod_url(namespace, name), data=patch, headers=MERGE
        ) as response:
            if response.status != 404:
                response.raise_for_status()

    async def delete_pod(self, namespace: str, name: str, *, uid: str) -> None:
        """Remove the pod now that its processes ended (grace 0, guarded by uid)."""
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        async with self.session.delete(self._pod_url(namespace, name), json=body) as response:
            if response.status not in (404, 409):
                response.raise_for_status()

    async def read(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        """GET a namespaced core object (secrets, configmaps); None when it does not exist."""
        url = f"{self.base_url}/api/v1/namespaces/{namespace}/{kind}/{name}"
        async with self.session.get(url) as response:
            if response.status == 404:
                return None
            response.raise_for_status()
            body: Mapping[str, Any] = await response.json()
            return body

    async def request_token(
        self, namespace: str, service_account: str, *, pod: str, uid: str, seconds: int
    ) -> str | None:
        """A token for the service account bound to the pod (TokenRequest), as a kubelet asks for
        a projected token; None when the server has no such account or no TokenRequest."""
        url = (
            f"{self.base_url}/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token"
        )
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": seconds,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid},
            },
        }
        async with self.session.post(url, json=request) as response:
            if response.status in (404, 405):
                return None
            response.raise_for_status()
            body = await response.json()
        return str(body["status"]["token"])

    async def create_event(
        self,
        pod: Mapping[str, Any],
        *,
        reason: str,
        message: str,
        node: str,
        at: str,
        container: str = "",
        kind: str = "Normal",
        first: str | None = None,
        count: int = 1,
    ) -> str:
        """Record a core/v1 Event about the pod, from the kubelet, as ``kubectl describe`` shows;
        its name. ``first`` and ``count``: when the Event was first seen and how often, for one
        that repeats an Event no longer there to patch."""
        metadata = pod.get("metadata") or {}
        namespace, name = metadata.get("namespace", "default"), metadata["name"]
        involved = {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": namespace,
            "name": name,
            "uid": metadata.get("uid", ""),
        }
        if container:
            involved["fieldPath"] = f"spec.containers{{{container}}}"
        event_name = f"{name}.{uuid.uuid4().hex[:16]}"
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": event_name, "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": "kubelet", "host": node},
            "reportingComponent": "kubelet",
            "reportingInstance": node,
            "firstTimestamp": first or at,
            "lastTimestamp": at,
            "count": count,
        }
        url = f"{self.base_url}/api/v1/namespaces/{namespace}/events"
        async with self.session.post(url, json=event) as response:
            response.raise_for_status()
        return event_name

    async def repeat_event(self, namespace: str, name: str, *, count: int, at: str) -> bool:
        """Raise the count of an Event that happened again, as the kubelet's recorder patches
        a repeat into the Event it already posted; False when that Event is gone."""
        url = f"{self.base_url}/api/v1/namespaces/{namespace}/events/{name}"
        body = json.dumps({"count": count, "lastTimestamp": at})
        async with self.session.patch(url, data=body, headers=MERGE) as response:
            if response.status == 404:
                return False
            response.raise_for_status()
            return True

    async def put_node(self, node: Mapping[str, Any]) -> None:
        """Register the node (create, or take over one of the same name), then set its status."""
        name = node["metadata"]["name"]
        url = f"{self.base_url}/api/v1/nodes"
        async with self.session.post(url, json=node) as response:
            if response.status != 409:
                response.raise_for_status()
        await self.patch_node_status(name, node["status"])

    async def patch_node_status(self, name: str, status: Mapping[str, Any]) -> None:
        url = f"{self.base_url}/api/v1/nodes/{name}/status"
        body = json.dumps({"status": status})
        async with self.session.patch(url, data=body, headers=MERGE) as response:
            response.raise_for_status()

    async def renew_lease(self, lease: Mapping[str, Any]) -> None:
        """Create or renew the node's Lease in kube-node-lease (its heartbeat)."""
        namespace, name = lease["metadata"]["namespace"], lease["metadata"]["name"]
        base = f"{self.base_url}/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        body = json.dumps({"spec": lease["spec"]})
        async with self.session.patch(f"{base}/{name}", data=body, headers=MERGE) as response:
            if response.status != 404:
                response.raise_for_status()
                return
        async with self.session.post(base, json=lease) as response:
            if response.status != 409:
                response.raise_for_status()
