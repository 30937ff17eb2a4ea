"""Reading a resource request: which object it names, its verb, body and query options.

Pure translation from an aiohttp request to the values the read, write, delete and watch paths
take; ``handlers`` calls these for every resource URL.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml
from aiohttp import web

from agentpool.local.apiserver.endpoints import protobuf
from agentpool.local.apiserver.endpoints.table import check_include
from agentpool.local.apiserver.endpoints.watch import DEFAULT_TIMEOUT, WatchRequest
from agentpool.local.apiserver.errors import ApiError, bad_request, method_not_allowed
from agentpool.local.apiserver.registry.core import Core, WriteOptions
from agentpool.local.apiserver.registry.metadata import body_too_large
from agentpool.local.apiserver.resources import ResourceType

NOT_FOUND = ApiError(404, "NotFound", "the server could not find the requested resource")


def _flag(query: Any, name: str) -> bool:
    return str(query.get(name, "")).lower() in ("true", "1")


def write_options(query: Any) -> WriteOptions:
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


def parse_target(core: Core, request: web.Request) -> Target:
    """The resource type, namespace, name and subresource a URL names; 404 if none."""
    info = request.match_info
    group, version = info.get("group", ""), info["version"]
    if not group and version != "v1":
        raise NOT_FOUND
    if group and not any(rt.group == group and rt.version == version for rt in core.registry):
        # As kube-apiserver: a group version it does not serve is no API path at all.
        raise web.HTTPNotFound()
    segments = info["tail"].strip("/").split("/")
    namespace = None
    if (
        segments[0] == "namespaces"
        and len(segments) >= 3
        and segments[2] not in ("status", "finalize")
    ):
        namespace, segments = segments[1], segments[2:]
    if len(segments) > 3:
        raise NOT_FOUND
    rt = core.resolve(group, version, segments[0])
    name = segments[1] if len(segments) > 1 else None
    sub = segments[2] if len(segments) > 2 else None
    if (namespace is not None and not rt.namespaced) or (
        rt.namespaced and namespace is None and name
    ):
        raise NOT_FOUND
    if sub is not None and rt.subresource(sub) is None:
        raise NOT_FOUND
    return Target(rt, namespace, name, sub)


async def read_body(request: web.Request) -> Any:
    """The request body as JSON data: JSON, YAML (for apply) or kubectl's protobuf."""
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise body_too_large() from None
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


def watch_request(request: web.Request, t: Target, match: Any) -> WatchRequest:
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
        table=table_mode(request),
    )


def table_mode(request: web.Request) -> str | None:
    accept = request.headers.get("Accept", "")
    first = accept.split(",")[0]
    if "as=Table" not in first:
        return None
    return check_include(request.query.get("includeObject"))


def delete_query(query: Any) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if query.get("propagationPolicy"):
        options["propagationPolicy"] = query["propagationPolicy"]
    if query.get("gracePeriodSeconds"):
        options["gracePeriodSeconds"] = int(query["gracePeriodSeconds"])
    if query.get("orphanDependents"):
        options["orphanDependents"] = _flag(query, "orphanDependents")
    return options


def verb_of(request: web.Request, t: Target) -> str:
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
