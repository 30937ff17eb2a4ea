"""Create, update and patch: every write path of the local API server.

Each write builds a fresh object from the request and the stored one, applies the kind's rules
(``kinds``), prunes, defaults and validates custom resources (``schema.validation``, with
top-level ratcheting), keeps ``status`` apart from the main resource, bumps ``generation`` only on
spec changes, honours ``dryRun``, then stores it, which logs the watch event whose resource
version the response carries. A write that changes nothing stores nothing, as on a real server.
The HTTP layer in ``handlers`` calls these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentpool.local.apiserver.errors import (
    Cause,
    already_exists,
    bad_request,
    conflict,
    invalid,
    not_found,
)
from agentpool.local.apiserver.registry import kinds, metadata, patch
from agentpool.local.apiserver.registry.core import (
    Core,
    NamespaceCheck,
    OwnerCheck,
    OwnerGone,
    WriteOptions,
    require_dict,
)
from agentpool.local.apiserver.registry.crds import resource_types
from agentpool.local.apiserver.registry.customs import custom_checks
from agentpool.local.apiserver.registry.scale import apply_scale, scale_of
from agentpool.local.apiserver.resources import ResourceType
from agentpool.local.apiserver.storage.store import Obj

CRDS = ("apiextensions.k8s.io", "customresourcedefinitions")

_KEEP_META = (
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
)


@dataclass
class Written:
    """A write's outcome: the object to answer with, whether it was created, any warnings."""

    obj: Obj
    created: bool = False
    warnings: list[str] = field(default_factory=list)


def _check_type(rt: ResourceType, body: Obj) -> None:
    api_version, kind = body.get("apiVersion"), body.get("kind")
    if api_version and api_version != rt.api_version:
        raise bad_request(
            f"the API version in the data ({api_version}) does not match the expected API "
            f"version ({rt.api_version})"
        )
    if kind and kind != rt.kind:
        raise bad_request(
            f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
        )


def _register(core: Core, crd: Obj) -> None:
    key = (crd["spec"]["group"], crd["spec"]["names"]["plural"])
    core.registry.remove(key)
    for rt in resource_types(crd):
        core.registry.add(rt)


def create(
    core: Core, rt: ResourceType, namespace: str, body: Any, options: WriteOptions
) -> Written:
    """POST: a new object with server-set metadata, or 409 AlreadyExists."""
    body = require_dict(body)
    _check_type(rt, body)
    meta = dict(body.get("metadata") or {})
    if rt.namespaced:
        if meta.get("namespace") and namespace and meta["namespace"] != namespace:
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent "
                "on the request"
            )
        namespace = namespace or meta.get("namespace") or "default"
        meta["namespace"] = namespace
    else:
        meta.pop("namespace", None)
        namespace = ""
    if not meta.get("name"):
        if not meta.get("generateName"):
            cause = Cause(
                "metadata.name",
                "Required value: name or generateName is required",
                "FieldValueRequired",
            )
            raise invalid(rt, "", [cause])
        meta["name"] = core.generate_name(meta["generateName"])
    name = meta["name"]
    causes = metadata.name_causes(rt, meta)
    if causes:
        raise invalid(rt, name, causes)
    if rt.namespaced:
        core.check_namespace(rt, namespace, name)
    obj = {
        **body,
        "apiVersion": rt.api_version,
        "kind": rt.kind,
        "metadata": omit_empty(core.new_metadata(rt, meta)),
    }
    decoded = _decode_builtin(rt, obj, options)
    causes = metadata.metadata_causes(rt, obj) + kinds.prepare_create(rt, obj, core.now())
    if causes:
        raise invalid(rt, name, causes)
    obj, warnings = custom_checks(rt, obj, None, options, name)
    warnings = decoded + warnings
    if core.store.get(rt.key, namespace, name) is not None:
        raise already_exists(rt, name)
    if options.dry_run:
        return Written(obj, created=True, warnings=warnings)
    metadata.check_stored_size(rt, obj)
    stored = core.store.put(rt.key, obj, None)
    if rt.key == CRDS:
        _register(core, stored)
    return Written(stored, created=True, warnings=warnings)


def _decode_builtin(rt: ResourceType, obj: Obj, options: WriteOptions) -> list[str]:
    """Drop a new pod's unknown container fields as the API server's decoder does: refused
    under ``fieldValidation=Strict``, warned of under ``Warn``; returns the warnings."""
    if rt.key != ("", "pods"):
        return []
    unknown = kinds.unknown_pod_fields(obj)
    if unknown and options.field_validation == "Strict":
        fields = ", ".join(f'unknown field "{u}"' for u in unknown)
        raise bad_request(
            f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
            f"strict decoding error: {fields}"
        )
    if options.field_validation == "Warn":
        return [f'unknown field "{u}"' for u in unknown]
    return []


_OMITTED_WHEN_EMPTY = ("labels", "annotations", "finalizers", "ownerReferences", "managedFields")


def omit_empty(meta: Obj) -> Obj:
    """Metadata as a real API server stores it: empty labels, annotations, finalizers and owner
    references are left out (so ``labels: {}`` reads back absent, and a second ``kubectl
    apply`` of it is ``unchanged``)."""
    return {k: v for k, v in meta.items() if not (k in _OMITTED_WHEN_EMPTY and not v)}


def drop_nulls(value: Any) -> Any:
    """Nulls vanish from built-in objects, as decoding into typed structs drops them."""
    if isinstance(value, dict):
        return {k: drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_nulls(v) for v in value]
    return value


def _spec_changed(rt: ResourceType, old: Obj, new: Obj) -> bool:
    skip = {"metadata", "status"} if rt.status else {"metadata"}
    keys = (set(old) | set(new)) - skip
    return any(old.get(k) != new.get(k) for k in keys)


def commit(
    core: Core,
    rt: ResourceType,
    old: Obj,
    new: Obj,
    options: WriteOptions,
    *,
    subresource: str | None = None,
) -> Written:
    """Store ``new`` in place of ``old`` under the rules every update and patch shares."""
    name = old["metadata"]["name"]
    if subresource == "status":
        new = {**old, "status": new.get("status"), "metadata": dict(old["metadata"])}
        if new["status"] is None:
            del new["status"]
    else:
        meta = dict(new.get("metadata") or {})
        for key in _KEEP_META:
            if key in old["metadata"]:
                meta[key] = old["metadata"][key]
            else:
                meta.pop(key, None)
        new = {**new, "apiVersion": rt.api_version, "kind": rt.kind, "metadata": meta}
        if rt.status and subresource is None:
            new.pop("status", None)
            if "status" in old:
                new["status"] = old["status"]
        _check_finalizers(rt, old, new)
    new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
    if not rt.custom:
        new = drop_nulls(new)
    new["metadata"] = omit_empty(new["metadata"])
    causes = metadata.metadata_causes(rt, new) + kinds.prepare_update(rt, old, new, core.now())
    if causes:
        raise invalid(rt, name, causes)
    new, warnings = custom_checks(rt, new, old, options, name)
    if rt.generation and _spec_changed(rt, old, new):
        new["metadata"]["generation"] = int(old["metadata"].get("generation", 1)) + 1
    if new == old:
        return Written(old, warnings=warnings)
    if options.dry_run:
        return Written(new, warnings=warnings)
    if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
        gone = core.store.remove(rt.key, new)
        after_removal(core, rt, gone)
        return Written(gone, warnings=warnings)
    metadata.check_stored_size(rt, new)
    stored = core.store.put(rt.key, new, old)
    if rt.key == CRDS:
        _register(core, stored)
    return Written(stored, warnings=warnings)


def after_removal(core: Core, rt: ResourceType, gone: Obj) -> None:
    """Tell the collector an object left: its dependents and owners may need attention."""
    meta = gone["metadata"]
    namespace = meta.get("namespace", "")
    core.schedule(OwnerGone(meta.get("uid", "")))
    for ref in meta.get("ownerReferences") or []:
        owner = core.store.uids.get(ref.get("uid", ""))
        if owner is not None:
            core.schedule(OwnerCheck(owner))
    if namespace:
        core.schedule(NamespaceCheck(namespace))
    if rt.key == CRDS:
        key = (gone["spec"]["group"], gone["spec"]["names"]["plural"])
        core.registry.remove(key)
        core.store.drop_resource(key)


def _check_finalizers(rt: ResourceType, old: Obj, new: Obj) -> None:
    if not old["metadata"].get("deletionTimestamp"):
        return
    before = set(old["metadata"].get("finalizers") or ())
    added = [f for f in new["metadata"].get("finalizers") or () if f not in before]
    if added:
        listed = ", ".join(f'"{f}"' for f in added)
        cause = Cause(
            "metadata.finalizers",
            "Forbidden: no new finalizers can be added if the "
            f"object is being deleted, found new finalizers []string{{{listed}}}",
            "FieldValueForbidden",
        )
        raise invalid(rt, old["metadata"]["name"], [cause])


def update(
    core: Core,
    rt: ResourceType,
    namespace: str,
    name: str,
    body: Any,
    options: WriteOptions,
    *,
    subresource: str | None = None,
) -> Written:
    """PUT: replace the object, 409 Conflict when the body's resourceVersion is stale."""
    body = require_dict(body)
    old = core.store.get(rt.key, namespace, name)
    if old is None:
        raise not_found(rt, name)
    if subresource == "scale":
        return _write_scale(core, rt, old, body, options)
    _check_type(rt, body)
    meta = body.get("metadata") or {}
    if meta.get("name") and meta["name"] != name:
        raise bad_request(
            f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
        )
    rv = meta.get("resourceVersion")
    if rv and rv != old["metadata"]["resourceVersion"]:
        raise conflict(rt, name)
    if not rv and rt.custom:
        cause = Cause(
            "metadata.resourceVersion", "Invalid value: 0x0: must be specified for an update"
        )
        raise invalid(rt, name, [cause])
    return commit(core, rt, old, body, options, subresource=subresource)


def patch_object(
    core: Core,
    rt: ResourceType,
    namespace: str,
    name: str,
    body: Any,
    content_type: str,
    options: WriteOptions,
    *,
    subresource: str | None = None,
) -> Written:
    """PATCH in any of the four types; apply creates the object when it is absent."""
    old = core.store.get(rt.key, namespace, name)
    if old is None:
        if content_type == patch.APPLY and subresource is None:
            body = require_dict(body)
            meta = {**(body.get("metadata") or {}), "name": name}
            return create(core, rt, namespace, {**body, "metadata": meta}, options)
        raise not_found(rt, name)
    if subresource == "scale":
        scaled = patch.apply_patch(scale_of(rt, old), body, content_type, custom=True)
        return _write_scale(core, rt, old, require_dict(scaled), options)
    patched = require_dict(patch.apply_patch(old, body, content_type, custom=rt.custom))
    rv = (patched.get("metadata") or {}).get("resourceVersion")
    if rv and rv != old["metadata"]["resourceVersion"]:
        raise conflict(rt, name)
    return commit(core, rt, old, patched, options, subresource=subresource)


def _write_scale(
    core: Core, rt: ResourceType, old: Obj, scale: Obj, options: WriteOptions
) -> Written:
    name = old["metadata"]["name"]
    rv = (scale.get("metadata") or {}).get("resourceVersion")
    if rv and rv != old["metadata"]["resourceVersion"]:
        raise conflict(rt, name)
    new = apply_scale(rt, old, scale)
    written = commit(core, rt, old, new, options)
    return Written(scale_of(rt, written.obj), warnings=written.warnings)
