"""``pods/log``: a pod's output, read from the file the local kubelet writes it to.

The local kubelet records the path in the pod annotation ``local.agentpool.dev/log-path``; this
module serves that file as ``text/plain``, honouring ``tailLines``, ``limitBytes`` and
``follow`` (keep streaming until the pod is gone or has finished and its output is drained), the
way ``kubectl logs`` and ``read_namespaced_pod_log`` expect. ``handlers`` calls ``serve_log``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from agentpool.local.apiserver.errors import bad_request
from agentpool.local.apiserver.storage.store import Obj

LOG_PATH_ANNOTATION = "local.agentpool.dev/log-path"
_POLL = 0.1
_CHUNK = 64 * 1024


def _tail(data: bytes, lines: int) -> bytes:
    if lines <= 0:
        return b""
    parts = data.splitlines(keepends=True)
    return b"".join(parts[-lines:])


def _path_of(pod: Obj) -> Path:
    annotations = pod["metadata"].get("annotations") or {}
    path = annotations.get(LOG_PATH_ANNOTATION)
    if not path:
        containers = (pod.get("spec") or {}).get("containers") or [{}]
        name = pod["metadata"]["name"]
        raise bad_request(
            f'container "{containers[0].get("name", "")}" in pod "{name}" is waiting to start: '
            "ContainerCreating"
        )
    return Path(path)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _finished(pod: Obj | None) -> bool:
    return pod is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


async def serve_log(
    request: web.Request,
    pod: Obj,
    *,
    current: Callable[[], Obj | None],
    stopping: Callable[[], bool],
) -> web.StreamResponse:
    """The pod's log; with ``follow`` it streams until the pod finishes or goes away."""
    path = _path_of(pod)
    query = request.query
    follow = query.get("follow") in ("true", "1")
    tail = int(query["tailLines"]) if query.get("tailLines") else None
    limit = int(query["limitBytes"]) if query.get("limitBytes") else None
    data = await asyncio.to_thread(path.read_bytes) if path.exists() else b""
    offset = len(data)
    if tail is not None:
        data = _tail(data, tail)
    if limit is not None:
        data = data[:limit]
    response = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await response.prepare(request)
    try:
        await response.write(data)
        sent = len(data)
        while follow and not stopping() and (limit is None or sent < limit):
            size = _size(path)
            if size > offset:
                with path.open("rb") as handle:
                    handle.seek(offset)
                    chunk = handle.read(min(size - offset, _CHUNK))
                offset += len(chunk)
                if limit is not None:
                    chunk = chunk[: limit - sent]
                await response.write(chunk)
                sent += len(chunk)
                continue
            if _finished(current()):
                break
            await asyncio.sleep(_POLL)
    except (ConnectionResetError, ConnectionError):
        return response
    await response.write_eof()
    return response
