"""The resource table: which group/version/resource the server serves, and how.

A :class:`ResourceType` is one served ``group/version/plural``: its kind, scope, subresources,
field labels, discovery details and the :class:`~devtools.cluster.apirules.strategy.Strategy` that
holds its write rules. Built-in types are registered at start (:mod:`.builtins`); each
CustomResourceDefinition adds one type per served version when it is created and removes them
when it is deleted (:mod:`.crds`).

Two versions of one resource share a storage key (``storage``), so they read and write the same
objects: that is how core/v1 and events.k8s.io/v1 Events are one set of objects seen two ways.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from devtools.cluster.apirules.errors import qualified_resource

if TYPE_CHECKING:
    from devtools.cluster.apirules.strategy import Strategy

__all__ = ["Registry", "ResourceType", "ScaleSpec"]

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ScaleSpec:
    """A CRD's scale subresource: JSON paths (``.spec.replicas``) into the custom object."""

    spec_replicas_path: str
    status_replicas_path: str
    label_selector_path: str | None = None


@dataclass(eq=False)
class ResourceType:
    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    strategy: Strategy
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    status_subresource: bool = False
    scale: ScaleSpec | None = None
    extra_subresources: tuple[str, ...] = ()  # e.g. pods/binding, namespaces/finalize
    field_labels: tuple[str, ...] = ("metadata.name", "metadata.namespace")
    storage: str = ""
    custom: bool = False  # served from a CustomResourceDefinition
    crd_name: str = ""
    printer_columns: tuple[dict[str, Any], ...] = ()
    extra_schema: Any = None  # a CRD version's openAPIV3Schema, published in /openapi/v3
    preserve_unknown_fields: bool = False
    selectable_fields: tuple[str, ...] = ()
    storage_version: str = ""  # the version objects are stored in (a CRD's storage version)
    to_external: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    to_internal: Callable[[dict[str, Any]], dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        if not self.storage:
            self.storage = qualified_resource(self.group, self.plural)
        if not self.storage_version:
            self.storage_version = self.version

    def present(self, stored: dict[str, Any]) -> dict[str, Any]:
        """A stored object as this version serves it (mutates and returns ``stored``)."""
        if self.to_external is not None:
            return self.to_external(stored)
        stored["apiVersion"] = self.api_version
        stored["kind"] = self.kind
        return stored

    def internal(self, obj: dict[str, Any]) -> dict[str, Any]:
        """An object of this version in its stored form (mutates and returns ``obj``)."""
        if self.to_internal is not None:
            return self.to_internal(obj)
        group = f"{self.group}/" if self.group else ""
        obj["apiVersion"] = f"{group}{self.storage_version}"
        return obj

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def qualified(self) -> str:
        """``plural[.group]``, the resource as messages and keys name it."""
        return qualified_resource(self.group, self.plural)

    @property
    def base_path(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def supports(self, verb: str) -> bool:
        return verb in self.verbs

    def subresources(self) -> list[str]:
        names = list(self.extra_subresources)
        if self.status_subresource:
            names.append("status")
        if self.scale is not None:
            names.append("scale")
        return sorted(names)


class Registry:
    """Every served resource type, found by (group, version, plural) or by storage key."""

    def __init__(self) -> None:
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        self._group_order: list[str] = []
        self.terminating: set[str] = set()  # names of CRDs whose instances are being removed

    def add(self, rtype: ResourceType) -> None:
        self._types[(rtype.group, rtype.version, rtype.plural)] = rtype
        if rtype.group not in self._group_order:
            self._group_order.append(rtype.group)

    def remove_crd(self, crd_name: str) -> list[ResourceType]:
        gone = [t for t in self._types.values() if t.crd_name == crd_name]
        for rtype in gone:
            del self._types[(rtype.group, rtype.version, rtype.plural)]
        live_groups = {t.group for t in self._types.values()}
        self._group_order = [g for g in self._group_order if g in live_groups]
        return gone

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._types.get((group, version, plural))

    def all(self) -> Iterable[ResourceType]:
        return self._types.values()

    def by_storage(self, storage: str) -> list[ResourceType]:
        return [t for t in self._types.values() if t.storage == storage]

    def find(self, group: str, plural: str) -> ResourceType | None:
        """Any served version of ``plural.group`` (the preferred one first)."""
        for version in self.versions(group):
            rtype = self.lookup(group, version, plural)
            if rtype is not None:
                return rtype
        return None

    def groups(self) -> list[str]:
        """Served groups in registration order; "" is the core group."""
        return list(self._group_order)

    def versions(self, group: str) -> list[str]:
        """Served versions of a group, preferred (first registered) first."""
        seen: list[str] = []
        for (g, v, _), _t in self._types.items():
            if g == group and v not in seen:
                seen.append(v)
        return _sort_versions(seen)

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [t for (g, v, _), t in self._types.items() if g == group and v == version]

    def namespaced_storages(self) -> list[str]:
        return sorted({t.storage for t in self._types.values() if t.namespaced})


def _version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes version ordering: GA > beta > alpha, higher numbers first."""
    match = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not match:
        return (3, 0, 0)
    major = int(match.group(1))
    stage = {"alpha": 2, "beta": 1, None: 0}[match.group(2)]
    minor = int(match.group(3) or 0)
    return (stage, -major, -minor)


def _sort_versions(versions: list[str]) -> list[str]:
    return sorted(versions, key=_version_priority)
