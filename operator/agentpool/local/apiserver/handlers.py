"""HTTP routes of the local API server: parse the Kubernetes URL scheme, count, dispatch, answer.

Resource URLs (``/api/v1/...``, ``/apis/{group}/{version}/...``, namespaced or not, with
subresources) go through ``Routes.resource``, which counts the request by verb and resource, calls
the read, write, delete, watch or log path, and answers JSON (or a Table when asked) with
``Content-Type: application/json``; any ``ApiError`` becomes a Status. Discovery, OpenAPI and
``/debug/counts`` have their own small routes. ``server.ApiServer`` builds the application.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml
from aiohttp import web

from agentpool.local.apiserver import deletion, discovery, openapi, patch, protobuf, writes
from agentpool.local.apiserver.core import Core, WriteOptions
from agentpool.local.apiserver.errors import ApiError, bad_request, method_not_allowed, not_found
from agentpool.local.apiserver.logs import serve_log
from agentpool.local.apiserver.resources import ResourceType
from agentpool.local.apiserver.scale import scale_of
from agentpool.local.apiserver.selectors import combine, field_selector, label_selector
from agentpool.local.apiserver.table import build_table, check_include
from agentpool.local.apiserver.watch import DEFAULT_TIMEOUT, WatchRequest, serve_watch

JSON = "application/json"
log = logging.getLogger(__name__)
_NOT_FOUND = ApiError(404, "NotFound", "the server could not find the requested resource")


def respond(body: Any, status: int = 200, warnings: list[str] | None = None) -> web.Response:
    response = web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(), status=status, content_type=JSON
    )
    for warning in warnings or ():
        response.headers.add("Warning", "299 - " + json.dumps(warning))
    return response


def _flag(query: Any, name: str) -> bool:
    return str(query.get(name, "")).lower() in ("true", "1")


def _options(query: Any) -> WriteOptions:
    dry = query.getall("dryRun", [])
    if any(value != "All" for value in dry):
        raise bad_request(f'dryRun: Unsupported value: "{dry[0]}": supported values: "All"')
    validation = query.get("fieldValidation") or "Warn"
    if validation not in ("Ignore", "Warn", "Strict"):
        raise bad_request(
            f"fieldValidation: Unsupported value: {json.dumps(validation)}: supported values: "
            '"Ignore", "Warn", "Strict"'
        )
    return WriteOptions(bool(dry), validation, query.get("fieldManager"))


@dataclass(frozen=True)
class Target:
    """A parsed resource URL."""

    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None

    @property
    def counted(self) -> str:
        return f"{self.rt.plural}/{self.subresource}" if self.subresource else self.rt.plural


class Routes:
    """The request handlers, sharing one ``Core``."""

    def __init__(
        self, core: Core, *, bookmark_interval: float, stopping: Callable[[], bool]
    ) -> None:
        self.core = core
        self.counts: Counter[tuple[str, str]] = Counter()
        self.bookmark_interval = bookmark_interval
        self.stopping = stopping

    def attach(self, app: web.Application) -> None:
        app.middlewares.append(_as_status)
        app.router.add_get("/version", self.version)
        app.router.add_get("/healthz", self.ok)
        app.router.add_get("/readyz", self.ok)
        app.router.add_get("/livez", self.ok)
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
        return respond(doc) if doc else respond(_NOT_FOUND.status(), 404)

    async def resources(self, request: web.Request) -> web.Response:
        group = request.match_info.get("group", "")
        doc = discovery.resource_list(self.core.registry, group, request.match_info["version"])
        return respond(doc) if doc else respond(_NOT_FOUND.status(), 404)

    async def openapi_index(self, request: web.Request) -> web.Response:
        return respond(openapi.index(self.core.registry))

    async def openapi_doc(self, request: web.Request) -> web.Response:
        parts = request.match_info["prefix"].split("/")
        doc = None
        if parts[0] == "api" and len(parts) == 2:
            doc = openapi.group_version_doc(self.core.registry, "", parts[1])
        elif parts[0] == "apis" and len(parts) == 3:
            doc = openapi.group_version_doc(self.core.registry, parts[1], parts[2])
        return respond(doc) if doc else respond(_NOT_FOUND.status(), 404)

    async def openapi_v2(self, request: web.Request) -> web.Response:
        return web.Response(body=b"", headers={"Content-Type": openapi.V2_CONTENT_TYPE})

    async def debug_counts(self, request: web.Request) -> web.Response:
        rows = [{"verb": v, "resource": r, "count": n} for (v, r), n in sorted(self.counts.items())]
        return respond(rows)

    def _target(self, request: web.Request) -> Target:
        info = request.match_info
        group, version = info.get("group", ""), info["version"]
        if not group and version != "v1":
            raise _NOT_FOUND
        segments = info["tail"].strip("/").split("/")
        namespace = None
        if (
            segments[0] == "namespaces"
            and len(segments) >= 3
            and segments[2] not in ("status", "finalize")
        ):
            namespace, segments = segments[1], segments[2:]
        if len(segments) > 3:
            raise _NOT_FOUND
        rt = self.core.resolve(group, version, segments[0])
        name = segments[1] if len(segments) > 1 else None
        sub = segments[2] if len(segments) > 2 else None
        if (namespace is not None and not rt.namespaced) or (
            rt.namespaced and namespace is None and name
        ):
            raise _NOT_FOUND
        allowed = {
            *rt.extra_subresources,
            *(("status",) if rt.status else ()),
            *(("scale",) if rt.scale else ()),
        }
        if sub is not None and sub not in allowed:
            raise _NOT_FOUND
        return Target(rt, namespace, name, sub)

    async def resource(self, request: web.Request) -> web.StreamResponse:
        try:
            target = self._target(request)
            verb = _verb(request, target)
            self.counts[(verb, target.counted)] += 1
            return await self._dispatch(request, target, verb)
        except ApiError as error:
            return respond(error.status(), error.code)

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        if not raw.strip():
            return None
        if request.content_type == protobuf.CONTENT_TYPE:
            return protobuf.decode(raw)
        try:
            return json.loads(raw)
        except ValueError:
            pass
        if "yaml" in request.content_type:
            try:
                return yaml.load(raw, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
            except yaml.YAMLError as error:
                raise bad_request(f"error decoding YAML: {error}") from None
        raise bad_request("the object provided is unrecognized (body is not valid JSON)")

    async def _dispatch(self, request: web.Request, t: Target, verb: str) -> web.StreamResponse:
        core, rt, query = self.core, t.rt, request.query
        namespace = t.namespace or ""
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
                    self._watch_request(request, t, match),
                    bookmark_interval=self.bookmark_interval,
                    stopping=self.stopping,
                )
            if verb == "deletecollection":
                options = await self._body(request) or {}
                gone = deletion.delete_collection(
                    core,
                    rt,
                    t.namespace,
                    match,
                    {**options, **_delete_query(query)},
                    dry_run=_options(query).dry_run,
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
            written = writes.create(core, rt, namespace, await self._body(request), _options(query))
            return respond(self._versioned(rt, written.obj), 201, written.warnings)
        if verb == "update":
            body = await self._body(request)
            written = writes.update(
                core, rt, namespace, t.name or "", body, _options(query), subresource=t.subresource
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
                await self._body(request),
                content_type,
                _options(query),
                subresource=t.subresource,
            )
            code = 201 if written.created else 200
            return respond(self._versioned(rt, written.obj), code, written.warnings)
        if verb == "delete":
            options = {**(await self._body(request) or {}), **_delete_query(query)}
            deleted = deletion.delete(
                core, rt, namespace, t.name or "", options, dry_run=_options(query).dry_run
            )
            still = core.store.get(rt.key, namespace, t.name or "") is not None
            return respond(self._versioned(rt, deleted), 202 if still else 200)
        raise method_not_allowed(verb, rt)

    def _watch_request(self, request: web.Request, t: Target, match: Any) -> WatchRequest:
        query = request.query
        timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else DEFAULT_TIMEOUT
        initial = query.get("sendInitialEvents")
        return WatchRequest(
            namespace=t.namespace,
            match=match,
            resource_version=query.get("resourceVersion"),
            timeout=timeout,
            bookmarks=_flag(query, "allowWatchBookmarks"),
            initial_events=None if initial is None else initial.lower() in ("true", "1"),
            rv_match=query.get("resourceVersionMatch"),
            table=_table_mode(request),
        )

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
        table = _table_mode(request)
        if table is not None:
            rv = items[0]["metadata"]["resourceVersion"] if single else str(self.core.store.rv)
            return respond(build_table(rt, items, resource_version=rv, include=table))
        return respond(self._versioned(rt, items[0]) if single else self._list(rt, items))


@web.middleware
async def _as_status(request: web.Request, handler: Any) -> web.StreamResponse:
    """Unknown paths, wrong methods and crashes answer as Status objects too, never plain text."""
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except ApiError as error:
        return respond(error.status(), error.code)
    except web.HTTPException as error:
        if error.status < 400:
            raise
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


def _table_mode(request: web.Request) -> str | None:
    accept = request.headers.get("Accept", "")
    first = accept.split(",")[0]
    if "as=Table" not in first:
        return None
    return check_include(request.query.get("includeObject"))


def _delete_query(query: Any) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if query.get("propagationPolicy"):
        options["propagationPolicy"] = query["propagationPolicy"]
    if query.get("gracePeriodSeconds"):
        options["gracePeriodSeconds"] = int(query["gracePeriodSeconds"])
    if query.get("orphanDependents"):
        options["orphanDependents"] = _flag(query, "orphanDependents")
    return options


def _verb(request: web.Request, t: Target) -> str:
    method = request.method
    if method == "GET":
        if t.name is None:
            return "watch" if _flag(request.query, "watch") else "list"
        return "get"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if t.name else "deletecollection"
    raise method_not_allowed(method.lower(), t.rt)
