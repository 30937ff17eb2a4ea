"""What the local API server serves: resource types and the registry that looks them up.

A ``ResourceType`` describes one served resource (group, version, plural, kind, scope, and what a
real API server knows about it: subresources, printer columns, schema). The built-in types are
declared in ``builtins``; custom ones appear when a CustomResourceDefinition is written (see
``crds``). Discovery, OpenAPI, routing and the store all read the same ``Registry``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from agentpool.api.columns import PrinterColumn

VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ScaleSpec:
    """Where a CRD's scale subresource reads and writes replicas (its ``scale`` stanza)."""

    spec_replicas_path: str
    status_replicas_path: str
    label_selector_path: str | None = None


@dataclass(frozen=True)
class Subresource:
    """A subresource beyond ``status`` and ``scale``: its name, its verbs, and the kind it takes
    and answers when that is not the resource's own (``serviceaccounts/token`` takes an
    ``authentication.k8s.io/v1`` TokenRequest)."""

    name: str
    verbs: tuple[str, ...] = ("get",)
    group: str | None = None
    version: str | None = None
    kind: str | None = None


@dataclass(frozen=True)
class ResourceType:
    """One served resource in one group-version."""

    group: str
    version: str
    plural: str
    kind: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    status: bool = False
    scale: ScaleSpec | None = None
    schema: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    columns: tuple[PrinterColumn, ...] = ()
    custom: bool = False
    generation: bool = False
    extra_subresources: tuple[Subresource, ...] = ()
    verbs: tuple[str, ...] = VERBS
    stored: bool = True
    """False for the reviews (TokenReview, SubjectAccessReview...): answered, never kept."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> str:
        return self.api_version

    @property
    def group_resource(self) -> str:
        """How error messages name the resource: ``pods`` or ``agentpools.agentpool.dev``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def key(self) -> tuple[str, str]:
        """Storage identity: every served version of a resource shares one set of objects."""
        return (self.group, self.plural)

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def subresources(self) -> tuple[Subresource, ...]:
        """Every subresource served, ``status`` and ``scale`` first, as discovery lists them."""
        served = []
        if self.status:
            served.append(Subresource("status", ("get", "patch", "update")))
        if self.scale is not None:
            served.append(
                Subresource("scale", ("get", "patch", "update"), "autoscaling", "v1", "Scale")
            )
        return (*served, *self.extra_subresources)

    def subresource(self, name: str) -> Subresource | None:
        return next((sub for sub in self.subresources if sub.name == name), None)


class Registry:
    """Served resource types, by group-version and plural."""

    def __init__(self) -> None:
        self._by_gv: dict[tuple[str, str], dict[str, ResourceType]] = {}
        self._by_key: dict[tuple[str, str], list[ResourceType]] = {}

    def add(self, rt: ResourceType) -> None:
        self._by_gv.setdefault((rt.group, rt.version), {})[rt.plural] = rt
        versions = [v for v in self._by_key.get(rt.key, []) if v.version != rt.version]
        self._by_key[rt.key] = [*versions, rt]

    def remove(self, key: tuple[str, str]) -> None:
        for rt in self._by_key.pop(key, []):
            plurals = self._by_gv.get((rt.group, rt.version), {})
            plurals.pop(rt.plural, None)
            if not plurals:
                self._by_gv.pop((rt.group, rt.version), None)

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_gv.get((group, version), {}).get(plural)

    def versions(self, key: tuple[str, str]) -> list[ResourceType]:
        return list(self._by_key.get(key, []))

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        group, _, version = api_version.rpartition("/")
        for rt in self._by_gv.get((group, version), {}).values():
            if rt.kind == kind:
                return rt
        return None

    def group_versions(self) -> list[tuple[str, str]]:
        return sorted(self._by_gv)

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return list(self._by_gv.get((group, version), {}).values())

    def __iter__(self) -> Iterator[ResourceType]:
        for plurals in list(self._by_gv.values()):
            yield from list(plurals.values())
