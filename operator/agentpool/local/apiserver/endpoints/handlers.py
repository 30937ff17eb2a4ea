"""HTTP routes of the local API server: parse the Kubernetes URL scheme, count, dispatch, answer.

Resource URLs (``/api/v1/...``, ``/apis/{group}/{version}/...``, namespaced or not, with
subresources) go through ``Routes.resource``, which counts the request by verb and resource,
refuses a verb the resource does not serve, calls the read, write, delete, watch or log path (or,
for the reviews and ``serviceaccounts/token``, ``reviews``), and answers JSON (or a Table when
asked) with ``Content-Type: application/json``; any ``ApiError`` becomes a Status. Discovery,
OpenAPI and ``/debug/counts`` have their own small routes. ``server.ApiServer`` builds the
application.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from aiohttp import web

from agentpool.local.apiserver.endpoints import discovery, openapi
from agentpool.local.apiserver.endpoints.logs import serve_log
from agentpool.local.apiserver.endpoints.parsing import (
    NOT_FOUND,
    Target,
    delete_query,
    parse_target,
    read_body,
    table_mode,
    verb_of,
    watch_request,
    write_options,
)
from agentpool.local.apiserver.endpoints.reviews import Reviews
from agentpool.local.apiserver.endpoints.table import build_table
from agentpool.local.apiserver.endpoints.watch import serve_watch
from agentpool.local.apiserver.errors import (
    ApiError,
    method_not_allowed,
    method_not_supported,
    not_found,
)
from agentpool.local.apiserver.registry import deletion, patch, writes
from agentpool.local.apiserver.registry.core import Core
from agentpool.local.apiserver.registry.scale import scale_of
from agentpool.local.apiserver.resources import ResourceType
from agentpool.local.apiserver.storage.selectors import combine, field_selector, label_selector

JSON = "application/json"
log = logging.getLogger(__name__)


def respond(body: Any, status: int = 200, warnings: list[str] | None = None) -> web.Response:
    response = web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(), status=status, content_type=JSON
    )
    for warning in warnings or ():
        response.headers.add("Warning", "299 - " + json.dumps(warning))
    return response


class Routes:
    """The request handlers, sharing one ``Core``."""

    def __init__(
        self,
        core: Core,
        *,
        bookmark_interval: float,
        stopping: Callable[[], bool],
        reviews: Reviews,
    ) -> None:
        self.core = core
        self.reviews = reviews
        self.counts: Counter[tuple[str, str]] = Counter()
        self.bookmark_interval = bookmark_interval
        self.stopping = stopping

    def attach(self, app: web.Application) -> None:
        app.middlewares.append(_as_status)
        app.router.add_get("/version", self.version)
        for probe in ("/healthz", "/readyz", "/livez"):
            app.router.add_get(probe, self.ok)
        app.router.add_get("/api", self.api)
        app.router.add_get("/apis", self.apis)
        app.router.add_get("/api/{version}", self.resources)
        app.router.add_get("/apis/{group}", self.group)
        app.router.add_get("/apis/{group}/{version}", self.resources)
        app.router.add_get("/openapi/v3", self.openapi_index)
        app.router.add_get("/openapi/v3/{prefix:.+}", self.openapi_doc)
        app.router.add_get("/openapi/v2", self.openapi_v2)
        app.router.add_get("/debug/counts", self.debug_counts)
        app.router.add_route("*", "/api/{version}/{tail:.+}", self.resource)
        app.router.add_route("*", "/apis/{group}/{version}/{tail:.+}", self.resource)

    async def ok(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def version(self, request: web.Request) -> web.Response:
        return respond(discovery.VERSION)

    async def api(self, request: web.Request) -> web.Response:
        return respond(discovery.core_versions(request.host))

    async def apis(self, request: web.Request) -> web.Response:
        return respond(discovery.group_list(self.core.registry))

    async def group(self, request: web.Request) -> web.Response:
        doc = discovery.group(self.core.registry, request.match_info["group"])
        return respond(doc) if doc else respond(NOT_FOUND.status(), 404)

    async def resources(self, request: web.Request) -> web.Response:
        group = request.match_info.get("group", "")
        doc = discovery.resource_list(self.core.registry, group, request.match_info["version"])
        return respond(doc) if doc else respond(NOT_FOUND.status(), 404)

    async def openapi_index(self, request: web.Request) -> web.Response:
        return respond(openapi.index(self.core.registry))

    async def openapi_doc(self, request: web.Request) -> web.Response:
        parts = request.match_info["prefix"].split("/")
        doc = None
        if parts[0] == "api" and len(parts) == 2:
            doc = openapi.group_version_doc(self.core.registry, "", parts[1])
        elif parts[0] == "apis" and len(parts) == 3:
            doc = openapi.group_version_doc(self.core.registry, parts[1], parts[2])
        return respond(doc) if doc else respond(NOT_FOUND.status(), 404)

    async def openapi_v2(self, request: web.Request) -> web.Response:
        return web.Response(body=b"", headers={"Content-Type": openapi.V2_CONTENT_TYPE})

    async def debug_counts(self, request: web.Request) -> web.Response:
        rows = [{"verb": v, "resource": r, "count": n} for (v, r), n in sorted(self.counts.items())]
        return respond(rows)

    async def resource(self, request: web.Request) -> web.StreamResponse:
        try:
            target = parse_target(self.core, request)
            verb = verb_of(request, target)
            self.counts[(verb, target.counted)] += 1
            return await self._dispatch(request, target, verb)
        except ApiError as error:
            return respond(error.status(), error.code)

    async def _dispatch(self, request: web.Request, t: Target, verb: str) -> web.StreamResponse:
        core, rt, query = self.core, t.rt, request.query
        namespace = t.namespace or ""
        sub = rt.subresource(t.subresource) if t.subresource else None
        if verb not in (sub.verbs if sub is not None else rt.verbs):
            raise method_not_supported()
        if not rt.stored or t.subresource == "token":
            return respond(await self.reviews.answer(request, t), 201)
        if verb in ("list", "watch", "deletecollection"):
            match = combine(
                label_selector(query.get("labelSelector")),
                field_selector(query.get("fieldSelector"), rt),
            )
            if verb == "watch":
                return await serve_watch(
                    request,
                    core,
                    rt,
                    watch_request(request, t, match),
                    bookmark_interval=self.bookmark_interval,
                    stopping=self.stopping,
                )
            if verb == "deletecollection":
                options = await read_body(request) or {}
                gone = deletion.delete_collection(
                    core,
                    rt,
                    t.namespace,
                    match,
                    {**options, **delete_query(query)},
                    dry_run=write_options(query).dry_run,
                )
                return respond(self._list(rt, gone))
            items = [o for o in core.store.items(rt.key, t.namespace) if match is None or match(o)]
            items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
            return self._read(request, rt, items, single=False)
        assert t.name is not None or verb == "create"
        if verb == "get":
            obj = core.store.get(rt.key, namespace, t.name or "")
            if obj is None:
                raise not_found(rt, t.name or "")
            if t.subresource == "scale":
                return respond(scale_of(rt, obj))
            if t.subresource == "log":
                return await serve_log(
                    request,
                    obj,
                    stopping=self.stopping,
                    current=lambda: core.store.get(rt.key, namespace, t.name or ""),
                )
            return self._read(request, rt, [obj], single=True)
        if verb == "create":
            if t.subresource is not None or (rt.namespaced and t.namespace is None):
                raise method_not_allowed("create", rt)
            written = writes.create(
                core, rt, namespace, await read_body(request), write_options(query)
            )
            return respond(self._versioned(rt, written.obj), 201, written.warnings)
        if verb == "update":
            body = await read_body(request)
            written = writes.update(
                core,
                rt,
                namespace,
                t.name or "",
                body,
                write_options(query),
                subresource=t.subresource,
            )
            return respond(self._versioned(rt, written.obj), 200, written.warnings)
        if verb == "patch":
            content_type = request.content_type
            if content_type not in (
                patch.MERGE_PATCH,
                patch.JSON_PATCH,
                patch.STRATEGIC,
                patch.APPLY,
            ):
                raise patch.apply_patch({}, {}, content_type, custom=rt.custom)
            written = writes.patch_object(
                core,
                rt,
                namespace,
                t.name or "",
                await read_body(request),
                content_type,
                write_options(query),
                subresource=t.subresource,
            )
            code = 201 if written.created else 200
            return respond(self._versioned(rt, written.obj), code, written.warnings)
        if verb == "delete":
            options = {**(await read_body(request) or {}), **delete_query(query)}
            deleted = deletion.delete(
                core, rt, namespace, t.name or "", options, dry_run=write_options(query).dry_run
            )
            still = core.store.get(rt.key, namespace, t.name or "") is not None
            return respond(self._versioned(rt, deleted), 202 if still else 200)
        raise method_not_allowed(verb, rt)

    def _versioned(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        if obj.get("apiVersion") == rt.api_version or obj.get("kind") != rt.kind:
            return obj
        return {**obj, "apiVersion": rt.api_version}

    def _list(self, rt: ResourceType, items: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "kind": rt.list_kind,
            "apiVersion": rt.api_version,
            "metadata": {"resourceVersion": str(self.core.store.rv)},
            "items": [self._versioned(rt, o) for o in items],
        }

    def _read(
        self, request: web.Request, rt: ResourceType, items: list[dict[str, Any]], *, single: bool
    ) -> web.Response:
        table = table_mode(request)
        if table is not None:
            rv = items[0]["metadata"]["resourceVersion"] if single else str(self.core.store.rv)
            return respond(build_table(rt, items, resource_version=rv, include=table))
        return respond(self._versioned(rt, items[0]) if single else self._list(rt, items))


@web.middleware
async def _as_status(request: web.Request, handler: Any) -> web.StreamResponse:
    """Wrong methods and crashes answer as Status objects; paths that are no API path answer
    ``404 page not found`` in plain text, as on a cluster."""
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except ApiError as error:
        return respond(error.status(), error.code)
    except web.HTTPException as error:
        if error.status < 400:
            raise
        if error.status == 404:
            # A path that is no API path (unrouted, or a group version not served): plain text,
            # as kube-apiserver's mux answers it.
            return web.Response(status=404, text="404 page not found", content_type="text/plain")
        reason = {404: "NotFound", 405: "MethodNotAllowed"}.get(error.status, "BadRequest")
        message = (
            "the server could not find the requested resource"
            if error.status == 404
            else error.reason
        )
        body = ApiError(error.status, reason, message).status()
        return respond(body, error.status)
    except Exception:
        log.exception("%s %s failed", request.method, request.path_qs)
        body = ApiError(500, "InternalError", "an error on the server has prevented the request "
                        "from succeeding").status()  # fmt: skip
        return respond(body, 500)
