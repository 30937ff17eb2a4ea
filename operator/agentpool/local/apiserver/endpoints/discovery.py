"""Discovery documents: ``/version``, ``/api``, ``/apis``, and one resource list per group-version.

Legacy (non-aggregated) discovery in plain ``application/json``, which kubectl, client-go and kopf
all accept whatever they ask for in Accept. ``/version`` always reports minor 32, because kubectl
on this machine is a dispatcher that picks its binary from that number. ``handlers`` serves these.
"""

from __future__ import annotations

from typing import Any

from agentpool.local.apiserver.resources import Registry, ResourceType

Doc = dict[str, Any]

VERSION: Doc = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0",
    "gitCommit": "agentpool-local",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.23",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def core_versions(address: str) -> Doc:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
    }


def _group(registry: Registry, group: str) -> Doc:
    versions = sorted({v for g, v in registry.group_versions() if g == group}, reverse=True)
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": entries, "preferredVersion": entries[0]}


def group_list(registry: Registry) -> Doc:
    groups = sorted({g for g, _ in registry.group_versions() if g})
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group(registry, g) for g in groups],
    }


def group(registry: Registry, name: str) -> Doc | None:
    if not any(g == name for g, _ in registry.group_versions()):
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(registry, name)}


def _entries(rt: ResourceType) -> list[Doc]:
    main: Doc = {
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(rt.verbs),
    }
    if rt.short_names:
        main["shortNames"] = list(rt.short_names)
    if rt.categories:
        main["categories"] = list(rt.categories)
    entries = [main]
    for sub in rt.subresources:
        entry: Doc = {
            "name": f"{rt.plural}/{sub.name}",
            "singularName": "",
            "namespaced": rt.namespaced,
        }
        if sub.group is not None:
            entry["group"], entry["version"] = sub.group, sub.version
        entries.append({**entry, "kind": sub.kind or rt.kind, "verbs": list(sub.verbs)})
    return entries


def resource_list(registry: Registry, group: str, version: str) -> Doc | None:
    kinds = registry.in_group_version(group, version)
    if not kinds:
        return None
    resources = [entry for rt in sorted(kinds, key=lambda r: r.plural) for entry in _entries(rt)]
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }
