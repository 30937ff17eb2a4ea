"""DELETE, deletecollection and the garbage collector.

Deletion follows the API server: an object with finalizers (or deleted with propagationPolicy
Foreground or Orphan, which add the ``foregroundDeletion`` / ``orphan`` finalizers) only gets a
``deletionTimestamp`` and stays until its finalizers are removed; otherwise it goes at once.
The collector, a background task fed by ``Core.schedule``, then deletes dependents whose owners
are all gone (Background), deletes dependents of a foreground deletion before releasing the owner,
strips owner references for Orphan, and empties a namespace being deleted.
"""

from __future__ import annotations

import logging
from typing import Any

from agentpool.local.apiserver.errors import bad_request, conflict, not_found
from agentpool.local.apiserver.registry.core import (
    NAMESPACES,
    Core,
    GcTask,
    NamespaceCheck,
    OwnerCheck,
    OwnerGone,
    WriteOptions,
)
from agentpool.local.apiserver.registry.writes import after_removal, commit
from agentpool.local.apiserver.resources import ResourceType
from agentpool.local.apiserver.storage.selectors import Predicate
from agentpool.local.apiserver.storage.store import Key, Obj, ObjectRef

log = logging.getLogger(__name__)
FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"


def delete(
    core: Core,
    rt: ResourceType,
    namespace: str,
    name: str,
    options: dict[str, Any],
    *,
    dry_run: bool = False,
) -> Obj:
    """Delete one object (or mark it deleting), answering with the object as a cluster does."""
    obj = core.store.get(rt.key, namespace, name)
    if obj is None:
        raise not_found(rt, name)
    meta = obj["metadata"]
    preconditions = options.get("preconditions") or {}
    if preconditions.get("uid") and preconditions["uid"] != meta.get("uid"):
        why = (
            f"Precondition failed: UID in precondition: {preconditions['uid']}, "
            f"UID in object meta: {meta.get('uid')}"
        )
        raise conflict(rt, name, why)
    rv = preconditions.get("resourceVersion")
    if rv and rv != meta.get("resourceVersion"):
        why = (
            f"Precondition failed: ResourceVersion in precondition: {rv}, "
            f"ResourceVersion in object meta: {meta.get('resourceVersion')}"
        )
        raise conflict(rt, name, why)
    policy = options.get("propagationPolicy")
    if policy is None and options.get("orphanDependents") is True:
        policy = "Orphan"
    if policy not in (None, "Background", "Foreground", "Orphan"):
        raise bad_request(f'propagationPolicy: Unsupported value: "{policy}"')
    finalizers = list(meta.get("finalizers") or [])
    if (
        policy == "Foreground"
        and FOREGROUND not in finalizers
        and core.store.owned_by(meta.get("uid", ""))
    ):
        finalizers.append(FOREGROUND)
    if policy == "Orphan" and ORPHAN not in finalizers:
        finalizers.append(ORPHAN)
    if dry_run:
        return obj
    if rt.key == NAMESPACES:
        if not meta.get("deletionTimestamp"):
            marked = {
                **obj,
                "metadata": {
                    **meta,
                    "deletionTimestamp": core.now(),
                    "deletionGracePeriodSeconds": 0,
                },
                "status": {**(obj.get("status") or {}), "phase": "Terminating"},
            }
            obj = core.store.put(rt.key, marked, obj)
        core.schedule(NamespaceCheck(name))
        return obj
    if finalizers:
        if meta.get("deletionTimestamp") and finalizers == list(meta.get("finalizers") or []):
            return obj
        marked_meta = {**meta, "finalizers": finalizers}
        marked_meta.setdefault("deletionTimestamp", core.now())
        marked_meta.setdefault("deletionGracePeriodSeconds", 0)
        obj = core.store.put(rt.key, {**obj, "metadata": marked_meta}, obj)
        if FOREGROUND in finalizers or ORPHAN in finalizers:
            core.schedule(OwnerCheck((rt.key, namespace, name)))
        return obj
    gone = core.store.remove(rt.key, obj)
    after_removal(core, rt, gone)
    return gone


def delete_collection(
    core: Core,
    rt: ResourceType,
    namespace: str | None,
    match: Predicate | None,
    options: dict[str, Any],
    *,
    dry_run: bool = False,
) -> list[Obj]:
    """Delete every matching object, each as ``delete`` would."""
    victims = [o for o in core.store.items(rt.key, namespace) if match is None or match(o)]
    return [
        delete(
            core,
            rt,
            o["metadata"].get("namespace", ""),
            o["metadata"]["name"],
            options,
            dry_run=dry_run,
        )
        for o in victims
    ]


def _release(core: Core, key: Key, obj: Obj, finalizer: str) -> None:
    rt = _any_version(core, key)
    if rt is None:
        return
    meta = obj["metadata"]
    remaining = [f for f in meta.get("finalizers") or [] if f != finalizer]
    commit(core, rt, obj, {**obj, "metadata": {**meta, "finalizers": remaining}}, WriteOptions())


def _any_version(core: Core, key: Key) -> ResourceType | None:
    versions = core.registry.versions(key)
    return versions[0] if versions else None


def _collect(core: Core, task: GcTask) -> None:
    match task:
        case OwnerGone(uid):
            _owner_gone(core, uid)
        case OwnerCheck(owner):
            _owner_check(core, owner)
        case NamespaceCheck(name):
            _namespace_check(core, name)


def _owner_gone(core: Core, uid: str) -> None:
    """Dependents keep their other live owners, or are deleted when none is left."""
    store = core.store
    for key, namespace, name in store.owned_by(uid):
        dependent = store.get(key, namespace, name)
        rt = _any_version(core, key)
        if dependent is None or rt is None:
            continue
        refs = dependent["metadata"].get("ownerReferences") or []
        alive = [r for r in refs if r.get("uid") != uid and r.get("uid") in store.uids]
        if alive:
            meta = {**dependent["metadata"], "ownerReferences": alive}
            commit(core, rt, dependent, {**dependent, "metadata": meta}, WriteOptions())
        elif not dependent["metadata"].get("deletionTimestamp"):
            delete(core, rt, namespace, name, {"propagationPolicy": "Background"})


def _owner_check(core: Core, ref: ObjectRef) -> None:
    """An owner being deleted: orphan its dependents, or delete them first (foreground)."""
    store = core.store
    owner_key = ref[0]
    owner = store.get(*ref)
    if owner is None or not owner["metadata"].get("deletionTimestamp"):
        return
    uid = owner["metadata"].get("uid", "")
    finalizers = owner["metadata"].get("finalizers") or []
    if ORPHAN in finalizers:
        for key, namespace, name in store.owned_by(uid):
            dependent = store.get(key, namespace, name)
            rt = _any_version(core, key)
            if dependent is not None and rt is not None:
                refs = [
                    r
                    for r in dependent["metadata"].get("ownerReferences") or []
                    if r.get("uid") != uid
                ]
                meta = {**dependent["metadata"], "ownerReferences": refs}
                commit(core, rt, dependent, {**dependent, "metadata": meta}, WriteOptions())
        _release(core, owner_key, owner, ORPHAN)
    elif FOREGROUND in finalizers:
        for key, namespace, name in store.owned_by(uid):
            rt = _any_version(core, key)
            dependent = store.get(key, namespace, name)
            if (
                rt is not None
                and dependent is not None
                and not dependent["metadata"].get("deletionTimestamp")
            ):
                delete(core, rt, namespace, name, {"propagationPolicy": "Foreground"})
        # As the garbage collector does: only dependents that block their owner's deletion
        # (blockOwnerDeletion) hold it; the others are deleted but not waited for.
        blocking = [
            dependent
            for dependent in (store.get(*key) for key in store.owned_by(uid))
            if dependent is not None and _blocks(dependent, uid)
        ]
        if not blocking:
            _release(core, owner_key, owner, FOREGROUND)


def _namespace_check(core: Core, namespace: str) -> None:
    """A namespace being deleted: delete what it holds, and the namespace once it is empty."""
    store = core.store
    ns_obj = store.get(NAMESPACES, "", namespace)
    if ns_obj is None or not ns_obj["metadata"].get("deletionTimestamp"):
        return
    kinds = [rt for rt in {rt.key: rt for rt in core.registry}.values() if rt.namespaced]
    for rt in kinds:
        for obj in list(store.items(rt.key, namespace)):
            if not obj["metadata"].get("deletionTimestamp"):
                delete(core, rt, namespace, obj["metadata"]["name"], {})
    if not any(store.bucket(rt.key).by_ns.get(namespace) for rt in kinds):
        gone = store.remove(NAMESPACES, ns_obj)
        after_removal(core, core.resolve("", "v1", "namespaces"), gone)


def _blocks(dependent: Obj, owner_uid: str) -> bool:
    refs = dependent["metadata"].get("ownerReferences") or []
    return any(r.get("uid") == owner_uid and r.get("blockOwnerDeletion") for r in refs)


async def run_collector(core: Core) -> None:
    """Drain the collector's queue until cancelled; one bad task never stops the rest."""
    queue = core.gc_queue
    assert queue is not None
    while True:
        task = await queue.get()
        try:
            _collect(core, task)
        except Exception:
            log.exception("garbage collection of %s failed", task)
