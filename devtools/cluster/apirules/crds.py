"""CustomResourceDefinitions: their own write rules, and how one becomes served resources.

A CRD is stored like any object; serving it is a consequence. :func:`served_types` derives one
:class:`~devtools.cluster.apirules.resources.ResourceType` per served version (scope, names,
subresources, printer columns, selectable fields, the structural schema), and
:func:`accepted_status` computes what the apiextensions controllers write back: NamesAccepted
(or a conflict with another CRD's names) and Established, with ``acceptedNames`` and
``storedVersions``.

Deletion follows ``customresourcedefinition/etcd.go``: the first DELETE adds the finalizer
``customresourcecleanup.apiextensions.k8s.io`` and a Terminating condition; the cleanup controller
(:mod:`~devtools.cluster.controllers.lifecycle`) then deletes every instance and removes the
finalizer.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from api.objects import Json, condition_is_true
from devtools.cluster.apirules.errors import (
    Cause,
    field_invalid,
    field_not_supported,
    field_required,
)
from devtools.cluster.apirules.resources import ResourceType, ScaleSpec
from devtools.cluster.apirules.strategy import (
    CustomResourceStrategy,
    SchemaLike,
    Strategy,
    WriteContext,
    load_schema,
)

if TYPE_CHECKING:
    from devtools.cluster.apirules.resources import Registry

__all__ = [
    "CLEANUP_FINALIZER",
    "CRDStrategy",
    "accepted_status",
    "crd_resource_type",
    "mark_terminating",
    "served_types",
]

CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
_SCHEMA_CACHE: dict[str, SchemaLike] = {}


def _names_with_defaults(names: Json) -> Json:
    out = copy.deepcopy(names)
    kind = out.get("kind") or ""
    out.setdefault("singular", kind.lower())
    out.setdefault("listKind", f"{kind}List")
    return out


class CRDStrategy(Strategy):
    """``customresourcedefinition/strategy.go``: status reset on create, generation on spec."""

    tracks_generation = True

    def normalize(self, rtype: ResourceType, obj: Json) -> list[str]:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return []
        if isinstance(spec.get("names"), dict):
            spec["names"] = _names_with_defaults(spec["names"])
        spec.setdefault("conversion", {"strategy": "None"})
        return []

    def initial_status(self, rtype: ResourceType, obj: Json) -> Json | None:
        storage = [
            v.get("name")
            for v in (obj.get("spec") or {}).get("versions") or []
            if isinstance(v, dict) and v.get("storage")
        ]
        return {
            "acceptedNames": {"kind": "", "plural": ""},
            "conditions": [],
            "storedVersions": storage[:1],
        }

    def validate(self, rtype: ResourceType, obj: Json, ctx: WriteContext) -> list[Cause]:
        return super().validate(rtype, obj, ctx) + _spec_causes(obj)

    def validate_update(
        self, rtype: ResourceType, new: Json, old: Json, ctx: WriteContext
    ) -> list[Cause]:
        causes = super().validate_update(rtype, new, old, ctx) + _spec_causes(new)
        new_spec = new.get("spec") or {}
        old_spec = old.get("spec") or {}
        if new_spec.get("scope") != old_spec.get("scope"):
            causes.append(field_invalid("spec.scope", new_spec.get("scope"), "field is immutable"))
        return causes


def _spec_causes(obj: Json) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [field_required("spec")]
    causes: list[Cause] = []
    group = spec.get("group") or ""
    names = spec.get("names")
    if not isinstance(names, dict):
        names = {}
    if not group:
        causes.append(field_required("spec.group"))
    elif "." not in group:
        causes.append(
            field_invalid("spec.group", group, "should be a domain with at least one dot")
        )
    for key in ("plural", "kind"):
        if not names.get(key):
            causes.append(field_required(f"spec.names.{key}"))
    expected = f"{names.get('plural', '')}.{group}"
    if obj["metadata"].get("name") != expected:
        causes.append(
            field_invalid(
                "metadata.name",
                obj["metadata"].get("name"),
                'must be spec.names.plural+"."+spec.group',
            )
        )
    if spec.get("scope") not in ("Cluster", "Namespaced"):
        causes.append(
            field_not_supported("spec.scope", spec.get("scope"), ("Cluster", "Namespaced"))
        )
    versions = spec.get("versions")
    if not isinstance(versions, list) or not versions:
        causes.append(
            field_required(
                "spec.versions", "must have exactly one version marked as storage version"
            )
        )
        return causes
    storage = [v for v in versions if isinstance(v, dict) and v.get("storage")]
    if len(storage) != 1:
        causes.append(
            field_invalid(
                "spec.versions",
                versions,
                "must have exactly one version marked as storage version",
                raw_value="[]apiextensions.CustomResourceDefinitionVersion{...}",
            )
        )
    for i, version in enumerate(versions):
        if not isinstance(version, dict) or not version.get("name"):
            causes.append(field_required(f"spec.versions[{i}].name"))
            continue
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if not isinstance(schema, dict):
            causes.append(
                field_required(f"spec.versions[{i}].schema.openAPIV3Schema", "schemas are required")
            )
    return causes


def _schema_for(version: Json) -> SchemaLike:
    schema = (version.get("schema") or {}).get("openAPIV3Schema") or {}
    import json

    key = json.dumps(schema, sort_keys=True)
    cached = _SCHEMA_CACHE.get(key)
    if cached is None:
        cached = _SCHEMA_CACHE[key] = load_schema(schema)
    return cached


def crd_resource_type(crd: Json, version: Json, strategy: Strategy) -> ResourceType:
    spec = crd["spec"]
    names = _names_with_defaults(spec["names"])
    subresources = version.get("subresources") or {}
    scale = subresources.get("scale")
    selectable = tuple(
        str(f.get("jsonPath", "")).lstrip(".")
        for f in version.get("selectableFields") or []
        if isinstance(f, dict)
    )
    root = (version.get("schema") or {}).get("openAPIV3Schema") or {}
    storage_version = next(
        (v["name"] for v in spec.get("versions") or [] if isinstance(v, dict) and v.get("storage")),
        version["name"],
    )
    return ResourceType(
        storage_version=storage_version,
        group=spec["group"],
        version=version["name"],
        plural=names["plural"],
        singular=names["singular"],
        kind=names["kind"],
        namespaced=spec.get("scope") == "Namespaced",
        strategy=strategy,
        short_names=tuple(names.get("shortNames") or ()),
        categories=tuple(names.get("categories") or ()),
        status_subresource="status" in subresources and subresources["status"] is not None,
        scale=ScaleSpec(
            scale.get("specReplicasPath", ".spec.replicas"),
            scale.get("statusReplicasPath", ".status.replicas"),
            scale.get("labelSelectorPath"),
        )
        if isinstance(scale, dict)
        else None,
        field_labels=("metadata.name", "metadata.namespace", *selectable),
        custom=True,
        crd_name=crd["metadata"]["name"],
        printer_columns=tuple(version.get("additionalPrinterColumns") or ()),
        preserve_unknown_fields=bool(root.get("x-kubernetes-preserve-unknown-fields")),
        extra_schema=root,
        selectable_fields=selectable,
    )


def served_types(crd: Json) -> list[ResourceType]:
    """The resource types a CRD serves (one per ``served`` version)."""
    versions = [v for v in (crd.get("spec") or {}).get("versions") or [] if isinstance(v, dict)]
    strategy = CustomResourceStrategy({v["name"]: _schema_for(v) for v in versions})
    return [crd_resource_type(crd, v, strategy) for v in versions if v.get("served", True)]


def _condition(ctype: str, reason: str, message: str, now: str, status: str = "True") -> Json:
    return {
        "type": ctype,
        "status": status,
        "lastTransitionTime": now,
        "reason": reason,
        "message": message,
    }


def _set_condition(conditions: list[Json], new: Json) -> list[Json]:
    out = []
    replaced = False
    for condition in conditions:
        if condition.get("type") == new["type"]:
            replaced = True
            if condition.get("status") == new["status"]:
                new = {**new, "lastTransitionTime": condition.get("lastTransitionTime")}
            out.append(new)
        else:
            out.append(condition)
    if not replaced:
        out.append(new)
    return out


def accepted_status(crd: Json, registry: Registry, now: str) -> Json:
    """The status the naming and establishing controllers give a CRD."""
    spec = crd["spec"]
    names = _names_with_defaults(spec["names"])
    status = copy.deepcopy(crd.get("status") or {})
    conditions = list(status.get("conditions") or [])
    conflict = _name_conflict(crd, names, registry)
    if conflict:
        conditions = _set_condition(
            conditions, _condition("NamesAccepted", conflict[0], conflict[1], now, "False")
        )
        if not any(c.get("type") == "Established" for c in conditions):
            conditions = _set_condition(
                conditions,
                _condition(
                    "Established", "NotAccepted", "not all names are accepted", now, "False"
                ),
            )
    else:
        status["acceptedNames"] = names
        conditions = _set_condition(
            conditions, _condition("NamesAccepted", "NoConflicts", "no conflicts found", now)
        )
        conditions = _set_condition(
            conditions,
            _condition(
                "Established", "InitialNamesAccepted", "the initial names have been accepted", now
            ),
        )
    status["conditions"] = conditions
    stored = list(status.get("storedVersions") or [])
    for version in spec.get("versions") or []:
        if version.get("storage") and version.get("name") not in stored:
            stored.append(version["name"])
    status["storedVersions"] = stored
    return status


def _name_conflict(crd: Json, names: Json, registry: Registry) -> tuple[str, str] | None:
    group = crd["spec"]["group"]
    mine = crd["metadata"]["name"]
    for rtype in registry.all():
        if rtype.group != group or rtype.crd_name == mine:
            continue
        if rtype.plural == names["plural"]:
            return "PluralConflict", f'"{names["plural"]}" is already in use'
        if rtype.kind == names["kind"]:
            return "KindConflict", f'"{names["kind"]}" is already in use'
        if names.get("singular") == rtype.singular:
            return "SingularConflict", f'"{names["singular"]}" is already in use'
        for short in names.get("shortNames") or ():
            if short in rtype.short_names:
                return "ShortNamesConflict", f'"{short}" is already in use'
    return None


def is_established(crd: Json) -> bool:
    return condition_is_true(crd, "Established")


def mark_terminating(crd: Json, now: str) -> None:
    """The first DELETE: deletionTimestamp, the cleanup finalizer, a Terminating condition."""
    meta = crd["metadata"]
    meta.setdefault("deletionTimestamp", now)
    finalizers = list(meta.get("finalizers") or [])
    if CLEANUP_FINALIZER not in finalizers:
        finalizers.append(CLEANUP_FINALIZER)
    meta["finalizers"] = finalizers
    status = crd.setdefault("status", {})
    status["conditions"] = _set_condition(
        list(status.get("conditions") or []),
        _condition(
            "Terminating",
            "InstanceDeletionPending",
            "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
            now,
        ),
    )
