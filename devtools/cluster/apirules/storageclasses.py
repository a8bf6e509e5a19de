"""storage.k8s.io/v1 StorageClass, the cluster's default class, and DefaultStorageClass admission.

A real cluster (kind, k3s, a managed one) comes with a default StorageClass, and the
``DefaultStorageClass`` admission plugin (``plugin/pkg/admission/storage/storageclass/setdefault``)
fills ``spec.storageClassName`` of a PersistentVolumeClaim created without one: only when the
claim names no class at all (the field absent or null, and no legacy
``volume.beta.kubernetes.io/storage-class`` annotation); an explicit ``""`` means "no class" and
is kept. The stand-in creates :data:`DEFAULT_STORAGE_CLASS` on a fresh store (as kind installs
its ``standard`` class): local-path's provisioner and ``WaitForFirstConsumer``, so a claim stays
``Pending`` as it would until a Pod uses it; nothing provisions or binds volumes here.

StorageClass writes follow ``pkg/registry/storage/storageclass/strategy.go`` and
``pkg/apis/storage/validation``: defaults ``reclaimPolicy: Delete`` and ``volumeBindingMode:
Immediate``; ``provisioner`` required; ``parameters``, ``provisioner``, ``reclaimPolicy`` and
``volumeBindingMode`` immutable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from api.objects import Json
from devtools.cluster.apirules.errors import (
    Cause,
    field_forbidden,
    field_invalid,
    field_not_supported,
    field_required,
)
from devtools.cluster.apirules.meta import qualified_name_errors
from devtools.cluster.apirules.resources import ResourceType
from devtools.cluster.apirules.strategy import Strategy, WriteContext

if TYPE_CHECKING:
    from devtools.cluster.storage.store import Store

__all__ = [
    "DEFAULT_STORAGE_CLASS",
    "IS_DEFAULT_CLASS",
    "StorageClassStrategy",
    "default_class_name",
    "storage_class_type",
]

IS_DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
_BETA_IS_DEFAULT_CLASS = "storageclass.beta.kubernetes.io/is-default-class"
_BETA_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"
STORAGE = "storageclasses.storage.k8s.io"

DEFAULT_STORAGE_CLASS: Json = {
    "apiVersion": "storage.k8s.io/v1",
    "kind": "StorageClass",
    "metadata": {"name": "standard", "annotations": {IS_DEFAULT_CLASS: "true"}},
    "provisioner": "rancher.io/local-path",
    "reclaimPolicy": "Delete",
    "volumeBindingMode": "WaitForFirstConsumer",
}


def _is_default(sc: Json) -> bool:
    annotations = (sc.get("metadata") or {}).get("annotations") or {}
    return any(annotations.get(k) == "true" for k in (IS_DEFAULT_CLASS, _BETA_IS_DEFAULT_CLASS))


def default_class_name(store: Store) -> str | None:
    """``GetDefaultClass``: among the classes marked default, the newest (then by name)."""
    marked = [sc for sc in store.items(STORAGE) if _is_default(sc)]
    if not marked:
        return None
    marked.sort(key=lambda sc: sc["metadata"].get("name") or "")
    marked.sort(key=lambda sc: sc["metadata"].get("creationTimestamp") or "", reverse=True)
    return str(marked[0]["metadata"]["name"])


def admit_default_class(obj: Json, ctx: WriteContext) -> None:
    """DefaultStorageClass admission on a PersistentVolumeClaim create."""
    spec = obj.get("spec")
    if not isinstance(spec, dict) or spec.get("storageClassName") is not None:
        return
    if _BETA_CLASS_ANNOTATION in ((obj.get("metadata") or {}).get("annotations") or {}):
        return
    name = default_class_name(ctx.store)
    if name is not None:
        spec["storageClassName"] = name


class StorageClassStrategy(Strategy):
    return_deleted_object = True  # the registry's ReturnDeletedObject: DELETE answers the class

    def normalize(self, rtype: ResourceType, obj: Json) -> list[str]:
        if obj.get("reclaimPolicy") is None:
            obj["reclaimPolicy"] = "Delete"
        if obj.get("volumeBindingMode") is None:
            obj["volumeBindingMode"] = "Immediate"
        return []

    def validate(self, rtype: ResourceType, obj: Json, ctx: WriteContext) -> list[Cause]:
        return super().validate(rtype, obj, ctx) + _class_causes(obj)

    def validate_update(
        self, rtype: ResourceType, new: Json, old: Json, ctx: WriteContext
    ) -> list[Cause]:
        causes = super().validate_update(rtype, new, old, ctx) + _class_causes(new)
        for key in ("parameters", "provisioner", "reclaimPolicy"):
            if new.get(key) != old.get(key):
                causes.append(field_forbidden(key, f"updates to {key} are forbidden."))
        if new.get("volumeBindingMode") != old.get("volumeBindingMode"):
            mode = new.get("volumeBindingMode")
            causes.append(field_invalid("volumeBindingMode", mode, "field is immutable"))
        return causes


def _class_causes(obj: Json) -> list[Cause]:
    causes: list[Cause] = []
    provisioner = obj.get("provisioner")
    if not provisioner:
        causes.append(field_required("provisioner"))
    elif isinstance(provisioner, str):
        for message in qualified_name_errors(provisioner):
            causes.append(field_invalid("provisioner", provisioner, message))
    policy = obj.get("reclaimPolicy")
    if policy not in ("Delete", "Retain"):
        causes.append(field_not_supported("reclaimPolicy", policy, ["Delete", "Retain"]))
    mode = obj.get("volumeBindingMode")
    if mode not in _BINDING_MODES:
        causes.append(field_not_supported("volumeBindingMode", mode, _BINDING_MODES))
    return causes


_BINDING_MODES = ["Immediate", "WaitForFirstConsumer"]


def storage_class_type(**kw: Any) -> ResourceType:
    return ResourceType(
        "storage.k8s.io",
        "v1",
        "storageclasses",
        "storageclass",
        "StorageClass",
        namespaced=False,
        strategy=StorageClassStrategy(),
        short_names=("sc",),
        field_labels=("metadata.name",),
        **kw,
    )
