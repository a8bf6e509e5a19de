"""A minimal ``/openapi/v3``: enough for kubectl to know what the server does itself.

kubectl (1.27+) reads OpenAPI v3 before ``apply``/``create``/``patch`` for one thing: whether
the PATCH operation of a kind accepts the ``fieldValidation`` query parameter. If it does,
kubectl leaves unknown-field checking to the server (``fieldValidation=Strict``); if it cannot
find out at all it refuses to run ("failed to download openapi"). So every served
group/version gets a document whose paths carry, per resource, a PATCH operation tagged with
``x-kubernetes-group-version-kind`` and the query parameters of the real one.

The PATCH request body deliberately lists no ``application/strategic-merge-patch+json``: kubectl
then computes strategic merge patches for built-in kinds from its compiled-in types and JSON
merge patches for custom resources, which is what it would do with the real schema, without us
having to publish the full schema. Custom resources also get their structural schema under
``components.schemas`` (tagged with ``x-kubernetes-group-version-kind``), which is what
``kubectl explain`` reads. ``/openapi/v2`` is an empty document: kubectl only falls back to it
to validate kinds the v3 documents do not know, and finding nothing there lets it reach its
"no matches for kind" error as against a real server.
"""

from __future__ import annotations

import hashlib
import json

from aiohttp import web

from api.objects import Json
from devtools.cluster.apirules.resources import Registry, ResourceType

__all__ = ["group_version_document", "root_document", "v2_response"]


_QUERY_PARAMETERS = ("dryRun", "fieldManager", "fieldValidation", "force")
_PATCH_TYPES = (
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
)


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def root_document(registry: Registry) -> Json:
    paths: Json = {}
    for group in registry.groups():
        for version in registry.versions(group):
            path = _gv_path(group, version)
            digest = (
                hashlib.sha512(
                    json.dumps(
                        group_version_document(registry, group, version), sort_keys=True
                    ).encode()
                )
                .hexdigest()[:64]
                .upper()
            )
            paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": paths}


_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_OBJECT_META_SCHEMA: Json = {
    "description": "ObjectMeta is metadata that all persisted resources must have, which "
    "includes all objects users must create.",
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "generateName": {"type": "string"},
        "namespace": {"type": "string"},
        "uid": {"type": "string"},
        "resourceVersion": {"type": "string"},
        "generation": {"type": "integer", "format": "int64"},
        "creationTimestamp": {"type": "string", "format": "date-time"},
        "deletionTimestamp": {"type": "string", "format": "date-time"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "finalizers": {"type": "array", "items": {"type": "string"}},
        "ownerReferences": {"type": "array", "items": {"type": "object"}},
    },
}
_METADATA_DESCRIPTION = (
    "Standard object's metadata. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)


def _published(rtype: ResourceType, root: Json) -> Json:
    """A CRD version's schema as the CRD OpenAPI builder publishes it: metadata refers to
    ObjectMeta, and the schema is tagged with its group/version/kind."""
    properties = dict(root.get("properties") or {})
    properties["metadata"] = {
        "allOf": [{"$ref": f"#/components/schemas/{_OBJECT_META}"}],
        "default": {},
        "description": _METADATA_DESCRIPTION,
    }
    return {
        **root,
        "properties": properties,
        "x-kubernetes-group-version-kind": [
            {"group": rtype.group, "version": rtype.version, "kind": rtype.kind}
        ],
    }


def _patch_operation(rtype: ResourceType) -> Json:
    return {
        "operationId": f"patch{rtype.kind}",
        "parameters": [
            {"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
            for name in _QUERY_PARAMETERS
        ],
        "requestBody": {
            "content": {media: {"schema": {"type": "object"}} for media in _PATCH_TYPES},
            "required": True,
        },
        "responses": {"200": {"description": "OK"}, "201": {"description": "Created"}},
        "x-kubernetes-action": "patch",
        "x-kubernetes-group-version-kind": {
            "group": rtype.group,
            "version": rtype.version,
            "kind": rtype.kind,
        },
    }


def group_version_document(registry: Registry, group: str, version: str) -> Json | None:
    types = registry.in_group_version(group, version)
    if not types:
        return None
    paths: Json = {}
    schemas: Json = {}
    base = f"/{_gv_path(group, version)}"
    for rtype in types:
        root = rtype.extra_schema
        if rtype.custom and isinstance(root, dict):
            reversed_group = ".".join(reversed(rtype.group.split(".")))
            schemas[f"{reversed_group}.{rtype.version}.{rtype.kind}"] = _published(rtype, root)
            schemas[_OBJECT_META] = _OBJECT_META_SCHEMA
        scope = "/namespaces/{namespace}" if rtype.namespaced else ""
        paths[f"{base}{scope}/{rtype.plural}/{{name}}"] = {
            "patch": _patch_operation(rtype),
            "parameters": [
                {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
            ],
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


# Clients ask for the deprecated "@v1.0" spelling, which Go's mime parser cannot read back, so
# the server answers with the dotted one (kube-openapi handler.go).
_V2_PROTOBUF_ACCEPT = "com.github.proto-openapi.spec.v2"
_V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"


def v2_response(accept: str) -> web.Response:
    """An empty OpenAPI v2 document, as protobuf (an empty message) or JSON."""
    if _V2_PROTOBUF_ACCEPT in accept:
        return web.Response(body=b"", headers={"Content-Type": _V2_PROTOBUF})
    document = {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": {},
        "definitions": {},
    }
    return web.json_response(document)
