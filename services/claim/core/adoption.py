"""Warm adoption (docs/agent-sandbox.md §3.5): which pool member a claim may take, and the
write that makes it the claim's.

A member is *adoptable* by a claim when it is not being deleted, carries the warm-pool and
template-ref-hash labels, and its controller is the SandboxWarmPool the claim names (any API
version of ``extensions.agents.x-k8s.io``). The queue only offers members the pool saw Ready;
the claim still checks, because an entry is a hint and the Sandbox is the truth.

The commit is one JSON merge patch of the Sandbox, conditional on the resourceVersion the
claim saw, computed as the difference between the member and the member made the claim's
(client-go's ``MergeFrom``): the pool's labels go, ``launch-type=warm``, ``claim-uid`` and
``created-by`` come, the owner references are replaced by the claim as controller, the
``pod-name`` annotation is set before the Sandbox can be observed Ready, the claim's trace
context travels along, and ``spec.podTemplate.metadata`` is replaced by what the claim's
Sandbox should carry (:func:`~.metadata.claim_pod_metadata`). The pod spec is never touched,
so claim env or volumes never reach a warm sandbox. Two claims that race for one member both
send the same precondition; the API server lets exactly one of them through.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

from api.keys import (
    ANNOTATION_POD_NAME,
    ANNOTATION_TRACE_CONTEXT,
    LABEL_CLAIM_UID,
    LABEL_CREATED_BY,
    LABEL_LAUNCH_TYPE,
    LABEL_SANDBOX_POD_TEMPLATE_HASH,
    LABEL_SANDBOX_TEMPLATE_HASH,
    LABEL_SANDBOX_TEMPLATE_REF_HASH,
    LABEL_WARM_POOL_SANDBOX,
    LAUNCH_TYPE_WARM,
    name_hash,
)
from api.objects import Json, controller_of, controller_reference, labels_of, metadata_of
from api.patching.merge import merge_patch
from services.claim.core.metadata import claim_pod_metadata

__all__ = [
    "CLAIM_API_VERSION",
    "adoptable_by",
    "adoption_patch",
    "controlled_by",
    "networked",
]

CLAIM_API_VERSION: Final = "extensions.agents.x-k8s.io/v1beta1"
_EXTENSIONS_GROUP: Final = "extensions.agents.x-k8s.io"


def controlled_by(sandbox: Mapping[str, Any] | None, claim: Mapping[str, Any]) -> bool:
    """Is ``sandbox`` controlled by this incarnation of ``claim``?"""
    if sandbox is None:
        return False
    owner = controller_of(sandbox)
    return (
        owner is not None
        and owner.get("kind") == "SandboxClaim"
        and owner.get("uid") == metadata_of(claim).get("uid")
    )


def adoptable_by(sandbox: Mapping[str, Any], pool_name: str) -> bool:
    """May a claim naming ``pool_name`` adopt ``sandbox`` (upstream ``isAdoptable`` plus the
    pool check of ``verifySandboxCandidate``)?"""
    if metadata_of(sandbox).get("deletionTimestamp"):
        return False
    labels = labels_of(sandbox)
    if not labels.get(LABEL_WARM_POOL_SANDBOX) or not labels.get(LABEL_SANDBOX_TEMPLATE_REF_HASH):
        return False
    owner = controller_of(sandbox)
    return (
        owner is not None
        and owner.get("kind") == "SandboxWarmPool"
        and str(owner.get("apiVersion") or "").split("/")[0] == _EXTENSIONS_GROUP
        and owner.get("name") == pool_name
    )


def networked(sandbox: Mapping[str, Any]) -> bool:
    """Does ``sandbox`` report a pod IP (what makes a warm sandbox usable at once)?"""
    return bool((sandbox.get("status") or {}).get("podIPs"))


def adoption_patch(
    sandbox: Mapping[str, Any],
    claim: Mapping[str, Any],
    template: Mapping[str, Any] | None,
    template_ref: str,
) -> Json:
    """The conditional merge patch that makes ``sandbox`` the claim's. Raises
    :class:`~.metadata.MetadataConflict` when the claim's pod metadata contradicts the
    template's."""
    claim_meta = metadata_of(claim)
    adopted: Json = copy.deepcopy(dict(sandbox))
    metadata: Json = adopted.setdefault("metadata", {})
    labels: Json = dict(labels_of(sandbox))
    for pool_label in (
        LABEL_WARM_POOL_SANDBOX,
        LABEL_SANDBOX_POD_TEMPLATE_HASH,
        LABEL_SANDBOX_TEMPLATE_HASH,
    ):
        labels.pop(pool_label, None)
    labels[LABEL_LAUNCH_TYPE] = LAUNCH_TYPE_WARM
    labels[LABEL_CLAIM_UID] = str(claim_meta.get("uid") or "")
    created_by = labels_of(claim).get(LABEL_CREATED_BY)
    if created_by:
        labels[LABEL_CREATED_BY] = str(created_by)
    else:
        labels.pop(LABEL_CREATED_BY, None)
    labels.setdefault(LABEL_SANDBOX_TEMPLATE_REF_HASH, name_hash(template_ref))
    metadata["labels"] = labels
    metadata["ownerReferences"] = [
        controller_reference(
            CLAIM_API_VERSION,
            "SandboxClaim",
            str(claim_meta.get("name") or ""),
            str(claim_meta.get("uid") or ""),
        )
    ]
    annotations: Json = dict(metadata.get("annotations") or {})
    annotations[ANNOTATION_POD_NAME] = str(metadata.get("name") or "")
    trace = (claim_meta.get("annotations") or {}).get(ANNOTATION_TRACE_CONTEXT)
    if trace:
        annotations[ANNOTATION_TRACE_CONTEXT] = trace
    metadata["annotations"] = annotations
    pod_template: Json = adopted.setdefault("spec", {}).setdefault("podTemplate", {})
    current = (
        pod_template.get("metadata") if isinstance(pod_template.get("metadata"), Mapping) else None
    )
    pod_template["metadata"] = claim_pod_metadata(template, claim, template_ref, current=current)
    patch = merge_patch(sandbox, adopted)
    patch.setdefault("metadata", {})["resourceVersion"] = str(
        metadata_of(sandbox).get("resourceVersion") or ""
    )
    return patch
