"""The local kubelet's own HTTPS port: container logs for a real API server's ``pods/log``.

A real kube-apiserver answers ``kubectl logs`` by asking the pod's node for
``/containerLogs/{namespace}/{pod}/{container}`` on the port the Node reports, over TLS, with
its kubelet client certificate. When the local kubelet is the node of a real control plane it
serves that path from the log files it writes, with the same options the local API server's
``pods/log`` honours (it shares :func:`agentpool.local.apiserver.endpoints.logs.serve_log`), and
takes only clients whose certificate the cluster's CA signed. Started by
:class:`agentpool.local.kubelet.Kubelet`.
"""

from __future__ import annotations

import asyncio
import ssl
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

from agentpool.certificates import KeyPair
from agentpool.local.apiserver.endpoints.logs import LOG_PATH_ANNOTATION, serve_log
from agentpool.local.apiserver.errors import ApiError

# find(namespace, pod) -> the pod as the kubelet last saw it, or None.
FindPod = Callable[[str, str], Mapping[str, Any] | None]
# log_path(namespace, pod) -> where the kubelet writes the pod's output, or None.
FindLog = Callable[[str, str], Path | None]


def server_context(serving: KeyPair, client_ca_pem: bytes) -> ssl.SSLContext:
    """TLS for the kubelet's port: its own certificate, clients signed by the cluster's CA."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cadata=client_ca_pem.decode())
    context.verify_mode = ssl.CERT_REQUIRED
    with tempfile.TemporaryDirectory() as directory:
        cert, key = serving.write(Path(directory), "kubelet")
        context.load_cert_chain(cert, key)
    return context


class KubeletServer:
    """Serves container logs on 127.0.0.1:port until ``stop()``."""

    def __init__(
        self, find: FindPod, log_path: FindLog, context: ssl.SSLContext, *, port: int = 0
    ) -> None:
        self._find = find
        self._log_path = log_path
        self._context = context
        self._port = port
        self._runner: web.AppRunner | None = None
        self._stopping = False
        self.port = 0

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", self._logs)
        app.router.add_get("/healthz", self._healthz)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self._port, ssl_context=self._context)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.base_events.Server)
        self.port = int(server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        self._stopping = True
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _logs(self, request: web.Request) -> web.StreamResponse:
        namespace, name = request.match_info["namespace"], request.match_info["pod"]
        pod, path = self._find(namespace, name), self._log_path(namespace, name)
        if pod is None or path is None:
            raise web.HTTPNotFound(text=f'pod "{name}" not found on this node')
        # The kubelet knows where it writes the output, whether or not the API has the
        # annotation that says so yet.
        metadata = dict(pod.get("metadata") or {})
        metadata["annotations"] = {
            **(metadata.get("annotations") or {}),
            LOG_PATH_ANNOTATION: str(path),
        }
        try:
            return await serve_log(
                request,
                {**pod, "metadata": metadata},
                current=lambda: _plain(self._find(namespace, name)),
                stopping=lambda: self._stopping,
            )
        except ApiError as error:
            raise web.HTTPBadRequest(text=error.message) from error


def _plain(pod: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return dict(pod) if pod is not None else None
