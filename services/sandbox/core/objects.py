"""Reading the Kubernetes objects a Sandbox owns, and deciding whether it owns them.

The Pods, Services and PVCs arrive as the JSON the API server serves (we do not model them as
types: the planners read a handful of fields), so the accessors here tolerate absent or
mistyped fields instead of raising: a malformed child must not stop a reconcile.

Ownership follows docs/agent-sandbox.md §2.5 (``checkOwnership``): an object whose controller
ownerReference carries the Sandbox's UID is *owned*; one without a controller reference is
*unowned* (adoptable only if it is labelled ``agents.x-k8s.io/adoptable=true`` or already
carries the Sandbox's name-hash label); anything else belongs to *another* controller and is
never touched.

Which writes are conditional (docs/architecture.md invariant 2: a write two actors could race
carries a resourceVersion precondition). Adoption decides on a snapshot that another actor may
change before the write lands: two Sandboxes that both see one unowned, adoptable Pod would each
write themselves in as its controller, and with ``ownerReferences`` replaced whole by a merge
patch the second write would silently take the Pod from the first. So every adoption is made
on the version it was planned on and refreshes on 409 Conflict (``on_conflict="refresh"``: the
object is read again and the pass planned anew, which then finds it owned by another):

- the Pod adoption patch (:mod:`.pods`) and the PVC adoption patch (:mod:`.volumes`) carry
  ``metadata.resourceVersion``;
- the Service adoption is a full Update whose body is the Service as read (:mod:`.headless`);
- the template's NetworkPolicy Update likewise (:mod:`.template`): its drift is someone
  else's write, and a conflict means another was made meanwhile.

Unconditional, and why that is safe: writes to objects the Sandbox (or template) already
controls, of fields only it decides (the owned Pod's labels and annotations, the owned
Service's selector and ports: merge patches that touch nothing else, so they lose no other
actor's change, and a later pass repairs them again); the status, which only this worker
writes (upstream: merge patch without lock, single writer); the Sandbox's ``pod-name`` and
trace-context annotations and the template's ref-hash label, hints that every pass derives
again from the objects (the owner UID, not the annotation, decides which Pod is the
Sandbox's). Deletes carry the ``uid`` precondition only, so they never remove a successor of
the same name; a resourceVersion there would fail at every kubelet status update, and a
Sandbox's ownership of its Pod is not taken away by anyone else. Creates need none: a second
create of the same name gets AlreadyExists.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Mapping
from typing import Any

from api.keys import LABEL_ADOPTABLE, LABEL_SANDBOX_NAME_HASH
from api.objects import Json, controller_of, labels_of, metadata_of, name_of

__all__ = [
    "Ownership",
    "adoptable",
    "owned_by_other_message",
    "ownership",
    "with_controller",
]


class Ownership(enum.Enum):
    OWNED = "owned"
    UNOWNED = "unowned"
    OTHER = "other"


def ownership(obj: Mapping[str, Any], owner_uid: str) -> Ownership:
    ref = controller_of(obj)
    if ref is None:
        return Ownership.UNOWNED
    return Ownership.OWNED if ref.get("uid") == owner_uid else Ownership.OTHER


def adoptable(obj: Mapping[str, Any], name_hash: str) -> bool:
    """May an unowned object be adopted by the Sandbox whose name hashes to ``name_hash``?"""
    labels = labels_of(obj)
    return labels.get(LABEL_ADOPTABLE) == "true" or labels.get(LABEL_SANDBOX_NAME_HASH) == name_hash


def owned_by_other_message(what: str, obj: Mapping[str, Any], owner_name: str) -> str:
    """``pod "p" is owned by ReplicaSet/rs (UID: u), not by sandbox "s"``, as upstream says it."""
    ref = controller_of(obj) or {}
    return (
        f'{what} "{name_of(obj)}" is owned by {ref.get("kind")}/{ref.get("name")} '
        f'(UID: {ref.get("uid")}), not by sandbox "{owner_name}"'
    )


def with_controller(obj: Mapping[str, Any], reference: Json) -> list[Json]:
    """``obj``'s ownerReferences with ``reference`` added as its controller (an unowned object:
    it has no other controller reference to replace)."""
    references = [
        copy.deepcopy(dict(ref))
        for ref in metadata_of(obj).get("ownerReferences") or ()
        if isinstance(ref, Mapping) and ref.get("uid") != reference["uid"]
    ]
    references.append(reference)
    return references
