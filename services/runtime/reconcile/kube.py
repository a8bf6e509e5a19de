"""The workers' Kubernetes client: create, get, merge-patch, replace and delete any kind we write,
as plain JSON, through kubernetes_asyncio's ``ApiClient``.

One small adapter instead of the generated per-kind APIs, for three reasons. The objects travel
as JSON dicts everywhere else (events, cache, planners), and the typed models would turn them
into classes and back. The generated ``patch_*`` methods send a dict body as json-patch
(custom objects) or strategic-merge-patch (built-in kinds); we always want a JSON merge patch,
which every kind accepts, so the content type is set here once. And a failure becomes one
exception, :class:`KubeError`, that says which of the answers a controller must tell apart
(NotFound, AlreadyExists, Conflict, Invalid) it was.

:data:`RESOURCES` maps a kind to its REST resource. Kinds are unique across the groups we use,
except ``Event``, which here always means ``events.k8s.io/v1``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

from kubernetes_asyncio import client as kube_client
from kubernetes_asyncio.client.exceptions import ApiException

from api.kinds import ALL_KINDS
from services.runtime.cache import Json, ObjectKey

__all__ = [
    "MERGE_PATCH",
    "RESOURCES",
    "KubeApi",
    "KubeError",
    "Resource",
    "resource_for",
]

MERGE_PATCH: Final = "application/merge-patch+json"
JSON: Final = "application/json"


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str, name: str | None = None, subresource: str | None = None) -> str:
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        parts = [root]
        if self.namespaced:
            parts.append(f"namespaces/{quote(namespace, safe='')}")
        parts.append(self.plural)
        if name is not None:
            parts.append(quote(name, safe=""))
            if subresource:
                parts.append(subresource)
        return "/".join(parts)


RESOURCES: Final[Mapping[str, Resource]] = {
    "Pod": Resource("", "v1", "pods"),
    "Service": Resource("", "v1", "services"),
    "PersistentVolumeClaim": Resource("", "v1", "persistentvolumeclaims"),
    "ConfigMap": Resource("", "v1", "configmaps"),
    "Secret": Resource("", "v1", "secrets"),
    "Event": Resource("events.k8s.io", "v1", "events"),
    "NetworkPolicy": Resource("networking.k8s.io", "v1", "networkpolicies"),
    "Job": Resource("batch", "v1", "jobs"),
    **{
        kind.KIND.kind: Resource(kind.KIND.group, kind.KIND.version, kind.KIND.plural)
        for kind in ALL_KINDS
    },
}


def resource_for(kind: str) -> Resource:
    try:
        return RESOURCES[kind]
    except KeyError:
        raise KubeError(0, "UnknownKind", f"sandbus does not write {kind} objects") from None


class KubeError(Exception):
    """A request the API server refused (or could not be sent: ``status`` 0)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        super().__init__(f"{reason} ({status}): {message}" if status else f"{reason}: {message}")

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def conflict(self) -> bool:
        return self.status == 409 and self.reason != "AlreadyExists"

    @classmethod
    def from_api_exception(cls, error: ApiException) -> KubeError:
        status = int(error.status or 0)
        reason = str(error.reason or "")
        message = str(error.body or "")
        try:
            body = json.loads(error.body) if error.body else None
        except (TypeError, ValueError):
            body = None
        if isinstance(body, Mapping) and body.get("kind") == "Status":
            reason = str(body.get("reason") or reason)
            message = str(body.get("message") or message)
        return cls(status, reason, message)


class KubeApi:
    """JSON in, JSON out, for the kinds in :data:`RESOURCES`."""

    def __init__(self, api_client: kube_client.ApiClient, *, field_manager: str) -> None:
        self._api = api_client
        self.field_manager = field_manager

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = JSON,
        query: list[tuple[str, str]] | None = None,
    ) -> Json:
        try:
            result = await self._api.call_api(
                path,
                method,
                query_params=query or [],
                header_params={"Accept": JSON, "Content-Type": content_type},
                body=body,
                response_types_map={200: "object", 201: "object", 202: "object"},
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _preload_content=True,
            )
        except ApiException as error:
            raise KubeError.from_api_exception(error) from None
        except OSError as error:
            raise KubeError(0, "Unreachable", str(error)) from None
        if not isinstance(result, dict):
            raise KubeError(0, "BadResponse", f"{method} {path} answered {result!r}")
        return result

    def _writing(self) -> list[tuple[str, str]]:
        return [("fieldManager", self.field_manager)]

    async def create(self, body: Json) -> Json:
        kind = str(body.get("kind") or "")
        namespace = str((body.get("metadata") or {}).get("namespace") or "")
        path = resource_for(kind).path(namespace)
        created = await self._call("POST", path, body=body, query=self._writing())
        return _with_kind(created, kind)

    async def list(self, kind: str, namespace: str) -> list[Json]:
        """Every object of ``kind`` in ``namespace``. Workers never list (they read the bus);
        this is for tools and tests that check what the API server holds."""
        listing = await self._call("GET", resource_for(kind).path(namespace))
        return [_with_kind(item, kind) for item in listing.get("items") or ()]

    async def get(self, key: ObjectKey) -> Json:
        path = resource_for(key.kind).path(key.namespace, key.name)
        return _with_kind(await self._call("GET", path), key.kind)

    async def patch(self, key: ObjectKey, patch: Json, *, subresource: str | None = None) -> Json:
        path = resource_for(key.kind).path(key.namespace, key.name, subresource)
        patched = await self._call(
            "PATCH", path, body=patch, content_type=MERGE_PATCH, query=self._writing()
        )
        return _with_kind(patched, key.kind)

    async def replace(self, body: Json) -> Json:
        kind = str(body.get("kind") or "")
        metadata = body.get("metadata") or {}
        path = resource_for(kind).path(str(metadata.get("namespace") or ""), str(metadata["name"]))
        replaced = await self._call("PUT", path, body=body, query=self._writing())
        return _with_kind(replaced, kind)

    async def delete(
        self,
        key: ObjectKey,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        propagation: str | None = None,
    ) -> Json:
        """The API's answer: the object while it is still terminating, else a Status (or, for
        some kinds, the deleted object without a deletionTimestamp)."""
        options: Json = {"apiVersion": "v1", "kind": "DeleteOptions"}
        preconditions = {
            name: value
            for name, value in (("uid", uid), ("resourceVersion", resource_version))
            if value
        }
        if preconditions:
            options["preconditions"] = preconditions
        if propagation:
            options["propagationPolicy"] = propagation
        path = resource_for(key.kind).path(key.namespace, key.name)
        return await self._call("DELETE", path, body=options)


def _with_kind(obj: Json, kind: str) -> Json:
    # Built-in kinds answer with apiVersion/kind set, but a caller should not have to care.
    if kind and not obj.get("kind"):
        obj["kind"] = kind
    return obj
