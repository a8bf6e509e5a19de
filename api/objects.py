"""The Kubernetes-object vocabulary: reading and shaping objects as the API serves them, as JSON.

Every part of sandbus meets Kubernetes objects as decoded JSON (``dict``, camelCase keys): the
events carry them, the workers' caches hold them, the planners read them and the development
cluster stores them. These are the few questions every one of them asks of such an object, each
answered once: its metadata and labels, its controller, a condition by type, and the owner
reference that makes one object the controller of another. Each accessor tolerates a missing
or malformed part (an empty mapping, an empty string) rather than raising: an object from the
wire is not trusted to have the shape its kind promises.

Pure and dependency-free, so that the contract, the domain rules, the services and the
development tooling can all import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "Json",
    "annotations_of",
    "compare_resource_versions",
    "condition_is_true",
    "condition_of",
    "controller_in",
    "controller_of",
    "controller_reference",
    "is_deleting",
    "is_ready",
    "labels_of",
    "metadata_of",
    "name_of",
    "resource_version_of",
    "uid_of",
]

Json = dict[str, Any]
"""A Kubernetes object, or a part of one, as decoded JSON."""


def metadata_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    if type(metadata) is dict:
        return metadata  # decoded JSON, as always: without the costlier check of an ABC
    return metadata if isinstance(metadata, Mapping) else {}


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    labels = metadata_of(obj).get("labels")
    if type(labels) is dict:
        return labels
    return labels if isinstance(labels, Mapping) else {}


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    annotations = metadata_of(obj).get("annotations")
    return annotations if isinstance(annotations, Mapping) else {}


def name_of(obj: Mapping[str, Any]) -> str:
    return str(metadata_of(obj).get("name") or "")


def uid_of(obj: Mapping[str, Any]) -> str:
    return str(metadata_of(obj).get("uid") or "")


def resource_version_of(obj: Mapping[str, Any]) -> str:
    return str(metadata_of(obj).get("resourceVersion") or "")


def is_deleting(obj: Mapping[str, Any]) -> bool:
    """Has the object a deletionTimestamp (it waits on finalizers or on its dependents)?"""
    return bool(metadata_of(obj).get("deletionTimestamp"))


def controller_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ownerReference with ``controller: true``, if any (there is at most one)."""
    return controller_in(metadata_of(obj).get("ownerReferences"))


def controller_in(references: Any) -> Mapping[str, Any] | None:
    """The controller among ``references`` (an object's ``ownerReferences``, if a list)."""
    for ref in references if isinstance(references, list | tuple) else ():
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return ref
    return None


def controller_reference(api_version: str, kind: str, name: str, uid: str) -> Json:
    """The ownerReference that makes the owner the object's controller and lets the garbage
    collector delete the object with it (``blockOwnerDeletion`` for foreground deletion)."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def condition_of(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """The ``status.conditions`` entry of type ``kind``, if the object has one."""
    status = obj.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for entry in conditions if isinstance(conditions, list | tuple) else ():
        if isinstance(entry, Mapping) and entry.get("type") == kind:
            return entry
    return None


def condition_is_true(obj: Mapping[str, Any], kind: str) -> bool:
    """Is the object's condition of type ``kind`` there with status ``"True"``?"""
    entry = condition_of(obj, kind)
    return entry is not None and entry.get("status") == "True"


def is_ready(obj: Mapping[str, Any]) -> bool:
    """Is the object's ``Ready`` condition ``"True"`` (a Pod, a Sandbox, a claim alike)?"""
    return condition_is_true(obj, "Ready")


def compare_resource_versions(a: str, b: str) -> int | None:
    """-1, 0 or 1 when ``a`` is older than, the same as, or newer than ``b``; None when the two
    cannot be ordered (only equal strings are "the same" then)."""
    if a == b:
        return 0
    if a.isdecimal() and b.isdecimal():
        return -1 if int(a) < int(b) else 1
    return None
