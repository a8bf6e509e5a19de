"""Discovery documents: /version, /api, /api/v1, /apis, /apis/G, /apis/G/V.

Only kubectl and the DynamicClient read these (the typed Python APIs do no discovery), but they
read them closely: kubectl maps short names and categories (``kubectl get all``) from the
APIResourceList, finds ``/status`` and ``/scale`` there, and the DynamicClient builds its
resource table from it. Aggregated discovery (apidiscovery.k8s.io/v2) is not offered; clients
that ask for it fall back to these legacy documents when the response is plain JSON.
"""

from __future__ import annotations

import hashlib

from api.objects import Json
from devtools.cluster.apirules.resources import Registry, ResourceType

__all__ = ["SERVER_VERSION", "api_resource_list", "api_versions", "group", "group_list", "version"]

SERVER_VERSION = {"major": "1", "minor": "33", "gitVersion": "v1.33.0"}


def version() -> Json:
    return {
        **SERVER_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-04-23T00:00:00Z",
        "goVersion": "go1.24.2",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def api_versions(server_address: str) -> Json:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _group_versions(registry: Registry, name: str) -> Json:
    versions = [{"groupVersion": f"{name}/{v}", "version": v} for v in registry.versions(name)]
    return {"name": name, "versions": versions, "preferredVersion": versions[0]}


def group_list(registry: Registry) -> Json:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group_versions(registry, g) for g in registry.groups() if g],
    }


def group(registry: Registry, name: str) -> Json | None:
    if not name or not registry.versions(name):
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_versions(registry, name)}


def _storage_version_hash(rtype: ResourceType) -> str:
    digest = hashlib.sha256(f"{rtype.group}/{rtype.storage_version}/{rtype.kind}".encode()).digest()
    import base64

    return base64.b64encode(digest[:8]).decode()


def _resource_entries(rtype: ResourceType) -> list[Json]:
    main: Json = {
        "name": rtype.plural,
        "singularName": rtype.singular,
        "namespaced": rtype.namespaced,
        "kind": rtype.kind,
        "verbs": list(rtype.verbs),
    }
    if rtype.short_names:
        main["shortNames"] = list(rtype.short_names)
    if rtype.categories:
        main["categories"] = list(rtype.categories)
    main["storageVersionHash"] = _storage_version_hash(rtype)
    entries = [main]
    for sub in rtype.subresources():
        entry: Json = {
            "name": f"{rtype.plural}/{sub}",
            "singularName": "",
            "namespaced": rtype.namespaced,
            "kind": rtype.kind,
            "verbs": ["get", "patch", "update"],
        }
        if sub == "scale":
            entry.update({"group": "autoscaling", "version": "v1", "kind": "Scale"})
        elif sub == "binding":
            entry.update({"kind": "Binding", "verbs": ["create"]})
        elif sub == "exec":
            entry.update({"kind": "PodExecOptions", "verbs": ["create", "get"]})
        elif sub == "finalize":
            entry["verbs"] = ["update"]
        entries.append(entry)
    return entries


def api_resource_list(registry: Registry, group_name: str, version_name: str) -> Json | None:
    types = registry.in_group_version(group_name, version_name)
    if not types:
        return None
    resources = [entry for rtype in types for entry in _resource_entries(rtype)]
    group_version = f"{group_name}/{version_name}" if group_name else version_name
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }
