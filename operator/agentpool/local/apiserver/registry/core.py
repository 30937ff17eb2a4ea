"""The API server's state and the rules every write shares: registry, store, clock, metadata.

``Core`` is what the HTTP layer talks to: it resolves resource types, owns the store and the
garbage-collection queue, and builds the server-set metadata (uid, timestamps, names) that
``writes`` and ``deletion`` stamp on objects. It knows nothing about HTTP.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from agentpool.api.conditions import format_time
from agentpool.local.apiserver.errors import ApiError, bad_request, forbidden
from agentpool.local.apiserver.registry import names
from agentpool.local.apiserver.registry.builtins import BUILTINS
from agentpool.local.apiserver.resources import Registry, ResourceType
from agentpool.local.apiserver.storage.store import (
    DEFAULT_HISTORY,
    HistoryLimits,
    Key,
    ObjectRef,
    Store,
)

NAMESPACES: Key = ("", "namespaces")
_SUFFIX_CHARS = "bcdfghjklmnpqrstvwxz2456789"


@dataclass(frozen=True)
class WriteOptions:
    """Query parameters every write honours."""

    dry_run: bool = False
    field_validation: str = "Warn"
    field_manager: str | None = None


class OwnerGone(NamedTuple):
    """An object with this uid left: its dependents lose it as an owner, or go with it."""

    uid: str


class OwnerCheck(NamedTuple):
    """An owner deleted in the foreground or orphaning its dependents may be free to go."""

    owner: ObjectRef


class NamespaceCheck(NamedTuple):
    """A namespace being deleted: delete what it holds, then the namespace once it is empty."""

    name: str


GcTask = OwnerGone | OwnerCheck | NamespaceCheck
"""One piece of the garbage collector's work: what to re-examine."""


class Core:
    """Registry, store, clock and the garbage collector's queue."""

    def __init__(
        self,
        *,
        history: HistoryLimits = DEFAULT_HISTORY,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.registry = Registry()
        for rt in BUILTINS:
            self.registry.add(rt)
        self.store = Store(history=history)
        self.clock = clock or (lambda: datetime.now(UTC))
        self.gc_queue: asyncio.Queue[GcTask] | None = None
        self.ensure_namespace("default")

    def now(self) -> str:
        return format_time(self.clock())

    def resolve(self, group: str, version: str, plural: str) -> ResourceType:
        rt = self.registry.get(group, version, plural)
        if rt is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return rt

    def ensure_namespace(self, name: str) -> None:
        if self.store.get(NAMESPACES, "", name) is None:
            obj = {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": name,
                    "uid": str(uuid.uuid4()),
                    "creationTimestamp": self.now(),
                    "labels": {"kubernetes.io/metadata.name": name},
                },
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            }
            self.store.put(NAMESPACES, obj, None)

    def schedule(self, task: GcTask) -> None:
        if self.gc_queue is not None:
            self.gc_queue.put_nowait(task)

    def check_namespace(self, rt: ResourceType, namespace: str, name: str) -> None:
        """Refuse writes into a namespace that is missing or being deleted, as a cluster does."""
        ns = self.store.get(NAMESPACES, "", namespace)
        if ns is None:
            raise ApiError(
                404,
                "NotFound",
                f'namespaces "{namespace}" not found',
                {"name": namespace, "kind": "namespaces"},
            )
        if ns["metadata"].get("deletionTimestamp"):
            why = (
                f"unable to create new content in namespace {namespace} "
                "because it is being terminated"
            )
            raise forbidden(rt, name, why)

    def generate_name(self, prefix: str) -> str:
        return names.generated_prefix(prefix) + "".join(random.choices(_SUFFIX_CHARS, k=5))

    def new_metadata(self, rt: ResourceType, meta: dict[str, Any]) -> dict[str, Any]:
        """Server-set fields of a new object; whatever the client sent for them is dropped."""
        fresh = {k: v for k, v in meta.items() if k not in _SERVER_FIELDS}
        fresh["uid"] = str(uuid.uuid4())
        fresh["creationTimestamp"] = self.now()
        if rt.generation:
            fresh["generation"] = 1
        return fresh


_SERVER_FIELDS = {
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "generation",
    "deletionGracePeriodSeconds",
    "selfLink",
}


def require_dict(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise bad_request("the object provided is unrecognized (must be of type object)")
    return body
