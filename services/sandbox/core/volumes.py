"""A Sandbox's PersistentVolumeClaims, one per volume claim template (docs/agent-sandbox.md §2.3,
§2.5; upstream ``reconcilePVCs``).

The PVC of template ``data`` for Sandbox ``s`` is ``data-s``: the template's labels plus the
name-hash label, the template's annotations, the template's spec, controlled by the Sandbox.
An existing PVC that the Sandbox controls is used as it is (a PVC's spec is immutable); an
unowned one is adopted, with the same label rule as Pods, by adding the Sandbox as its
controller, in a merge patch conditional on the PVC's resourceVersion (a 409 means someone else
wrote first, maybe another adopter: the next pass decides again on the fresh PVC); one
controlled by someone else is an error. The templates are handled in order and
the first error stops the rest. The controller never deletes a PVC: not on suspend, not on
expiry; the garbage collector removes it with the Sandbox.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from api.agents import Sandbox
from api.keys import LABEL_ADOPTABLE, LABEL_SANDBOX_NAME_HASH
from api.objects import Json, resource_version_of
from events.envelope import ObjectKey
from services.runtime.reconcile.actions import Action, Create, Patch
from services.sandbox.core.objects import (
    Ownership,
    adoptable,
    owned_by_other_message,
    ownership,
    with_controller,
)
from services.sandbox.core.pods import sandbox_reference

__all__ = ["ClaimsPlan", "claim_name", "plan_claims"]


def claim_name(template_name: str, sandbox_name: str) -> str:
    return f"{template_name}-{sandbox_name}"


@dataclass(frozen=True)
class ClaimsPlan:
    actions: tuple[Action, ...] = ()
    error: str | None = None


def plan_claims(sandbox: Sandbox, existing: dict[str, Json], name_hash: str) -> ClaimsPlan:
    name = sandbox.metadata.name or ""
    namespace = sandbox.metadata.namespace or ""
    actions: list[Action] = []
    for template in sandbox.spec.volume_claim_templates or ():
        template_name = template.metadata.name if template.metadata else None
        if not template_name:
            continue  # refused earlier by validation
        pvc_name = claim_name(template_name, name)
        pvc = existing.get(pvc_name)
        if pvc is None:
            labels = dict(template.metadata.labels or {}) if template.metadata else {}
            labels[LABEL_SANDBOX_NAME_HASH] = name_hash
            metadata: Json = {
                "name": pvc_name,
                "namespace": namespace,
                "labels": labels,
                "ownerReferences": [sandbox_reference(sandbox)],
            }
            if template.metadata and template.metadata.annotations:
                metadata["annotations"] = dict(template.metadata.annotations)
            body: Json = {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": metadata,
                "spec": copy.deepcopy(template.spec),
            }
            actions.append(
                Create(body, why=f"create the PVC of volume claim template {template_name}")
            )
            continue
        owner = ownership(pvc, sandbox.metadata.uid or "")
        if owner is Ownership.OWNED:
            continue
        if owner is Ownership.OTHER:
            return ClaimsPlan(tuple(actions), owned_by_other_message("PVC", pvc, name))
        if not adoptable(pvc, name_hash):
            return ClaimsPlan(
                tuple(actions),
                f'cannot adopt unowned PVC "{pvc_name}": missing required pool authorization '
                f'label ("{LABEL_ADOPTABLE}") or sandbox tracking label '
                f'("{LABEL_SANDBOX_NAME_HASH}")',
            )
        references = with_controller(pvc, sandbox_reference(sandbox))
        actions.append(
            Patch(
                target=ObjectKey("PersistentVolumeClaim", namespace, pvc_name),
                patch={
                    "metadata": {
                        "ownerReferences": references,
                        "resourceVersion": resource_version_of(pvc),
                    }
                },
                why="adopt the PVC",
                on_conflict="refresh",
            )
        )
    return ClaimsPlan(tuple(actions))
