"""The local kubelet's Node: registered with the API server and kept current, as a kubelet does.

On a real control plane a pod runs only on a node that exists, and node-aware parts of the API
server (the Node authorizer, ``kubectl logs`` through the kubelet's port, ``kubectl get nodes``)
read the Node object. The local kubelet registers node ``local`` with a Ready condition, its
loopback address and its version, and renews its Lease in ``kube-node-lease`` as a real kubelet's
heartbeat does. :func:`node_manifest` and :func:`lease_manifest` are pure; :func:`heartbeat` is
the loop :class:`agentpool.local.kubelet.Kubelet` runs when asked to register its node.
"""

from __future__ import annotations

import asyncio
import logging
import platform
from datetime import UTC, datetime
from typing import Any

import aiohttp

from agentpool.api.conditions import format_micro_time, format_time
from agentpool.local.kubelet.podapi import PodApi

logger = logging.getLogger(__name__)

#: A real kubelet renews its Lease every 10 s (a quarter of the 40 s lease) and reports its
#: status at least every 5 minutes, or at once when a condition changes.
LEASE_SECONDS = 40
RENEW_SECONDS = 10.0
STATUS_SECONDS = 60.0
NODE_LEASE_NAMESPACE = "kube-node-lease"


def node_status(now: datetime, *, kubelet_port: int, version: str) -> dict[str, Any]:
    """The node's status: Ready, its loopback address, where its kubelet serves, what it is."""
    stamp = format_time(now)
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "the local kubelet is posting ready status",
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
    }
    capacity = {"cpu": "2", "memory": "8Gi", "pods": "1000"}
    return {
        "conditions": [ready],
        "addresses": [
            {"type": "InternalIP", "address": "127.0.0.1"},
            {"type": "Hostname", "address": "local"},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
        "capacity": capacity,
        "allocatable": capacity,
        "nodeInfo": {
            "machineID": "",
            "systemUUID": "",
            "bootID": "",
            "kernelVersion": platform.release(),
            "osImage": "local processes",
            "containerRuntimeVersion": "local://1",
            "kubeletVersion": version,
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }


def node_manifest(name: str, now: datetime, *, kubelet_port: int, version: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "type": "local",
            },
        },
        "spec": {},
        "status": node_status(now, kubelet_port=kubelet_port, version=version),
    }


def lease_manifest(name: str, now: datetime) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": NODE_LEASE_NAMESPACE},
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": format_micro_time(now),
        },
    }


async def heartbeat(api: PodApi, name: str, *, kubelet_port: int, version: str) -> None:
    """Register the node, then renew its Lease and refresh its status until cancelled."""
    registered = False
    last_status = 0.0
    loop = asyncio.get_running_loop()
    while True:
        now = datetime.now(UTC)
        try:
            if not registered:
                await api.put_node(
                    node_manifest(name, now, kubelet_port=kubelet_port, version=version)
                )
                registered, last_status = True, loop.time()
            elif loop.time() - last_status >= STATUS_SECONDS:
                await api.patch_node_status(
                    name, node_status(now, kubelet_port=kubelet_port, version=version)
                )
                last_status = loop.time()
            await api.renew_lease(lease_manifest(name, now))
        except (aiohttp.ClientError, OSError) as error:
            logger.warning("node %s heartbeat failed (%s); trying again", name, error)
        await asyncio.sleep(RENEW_SECONDS)
