"""``pool_sandbox``: the Sandbox a SandboxWarmPool creates from its template
(docs/agent-sandbox.md §4.3; upstream ``buildSandboxCR``, pool:1037-1100).

- Name: ``generateName: "<pool>-"``; the API server appends five random characters. The body
  is the same for every member, so one body serves a whole batch of creates.
- Labels on the Sandbox: ``warm-pool-sandbox = NameHash(pool)`` (the pool's selector, and its
  index of members), ``sandbox-template-ref-hash = NameHash(templateRef)`` (which template the
  member was made from: a renamed ref makes every member stale, §4.5), ``launch-type=warm``,
  the two template hashes (``sandbox-template-hash`` over the whole blueprint, the deprecated
  ``sandbox-pod-template-hash`` over the podTemplate; :mod:`.hashes`) and
  ``created-by=controller``. Annotation ``sandbox-template-ref = <templateRef>``.
- Spec: a deep copy of the template's SandboxBlueprint, every field of
  :class:`api.agents.SandboxBlueprint` (so a field added there is copied without an edit
  here), and nothing else of the template (its policies stay on the template). The
  podTemplate's labels get the pool hash, the ref hash and both template hashes (the core
  controller strips the system-prefixed keys again before they reach the Pod, §11 item 5);
  its annotations get ``cluster-autoscaler.kubernetes.io/safe-to-evict: "true"`` when warm-pool
  eviction is enabled (``--enable-warm-pool-eviction``, default on) and the template does not
  declare that key itself (an explicit ``"false"`` or ``"true"`` is always kept). Then the
  secure defaults (:mod:`.secure_defaults`).
- Owner: the pool, as controller with ``blockOwnerDeletion``, so deleting the pool deletes its
  unclaimed members through the garbage collector (there are no finalizers).

The ref-hash labels and the ref annotation use the pool's ``spec.sandboxTemplateRef.name``,
not the template's own name: upstream reads the ref, and the two are the same whenever a
template was found.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from api.agents import Sandbox, SandboxBlueprint, SandboxWarmPool
from api.keys import (
    ANNOTATION_SAFE_TO_EVICT,
    ANNOTATION_SANDBOX_TEMPLATE_REF,
    CREATED_BY_CONTROLLER,
    LABEL_CREATED_BY,
    LABEL_LAUNCH_TYPE,
    LABEL_SANDBOX_POD_TEMPLATE_HASH,
    LABEL_SANDBOX_TEMPLATE_HASH,
    LABEL_SANDBOX_TEMPLATE_REF_HASH,
    LABEL_WARM_POOL_SANDBOX,
    LAUNCH_TYPE_WARM,
    name_hash,
)
from api.objects import Json, controller_reference, metadata_of
from services.domain.agentsandbox.hashes import blueprint_hash, pod_template_hash
from services.domain.agentsandbox.secure_defaults import apply_secure_defaults
from services.domain.agentsandbox.warmpool import template_ref_name

__all__ = ["BLUEPRINT_FIELDS", "pool_sandbox"]

BLUEPRINT_FIELDS: Final = tuple(
    field.encode_name for field in msgspec.structs.fields(SandboxBlueprint)
)
"""The wire names of the SandboxBlueprint fields (``podTemplate``, ``volumeClaimTemplates``,
``service``): what a pool member's spec copies from its template."""


def pool_sandbox(
    pool: Mapping[str, Any], template: Mapping[str, Any], *, eviction: bool = True
) -> Json:
    """The body of a new member of ``pool``, made from ``template`` (both as the API serves
    them); ``eviction`` is the ``--enable-warm-pool-eviction`` flag. Neither input is changed."""
    pool_metadata = metadata_of(pool)
    pool_name = str(pool_metadata.get("name") or "")
    ref = template_ref_name(pool)
    template_spec = _mapping(template.get("spec"))
    system_labels = {
        LABEL_WARM_POOL_SANDBOX: name_hash(pool_name),
        LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash(ref),
        LABEL_SANDBOX_POD_TEMPLATE_HASH: pod_template_hash(template_spec),
        LABEL_SANDBOX_TEMPLATE_HASH: blueprint_hash(template_spec),
    }

    spec: Json = {
        field: copy.deepcopy(template_spec[field])
        for field in BLUEPRINT_FIELDS
        if template_spec.get(field) is not None
    }
    pod_template: Json = dict(_mapping(spec.get("podTemplate")))
    pod_metadata: Json = dict(_mapping(pod_template.get("metadata")))
    pod_metadata["labels"] = {**_mapping(pod_metadata.get("labels")), **system_labels}
    annotations = _mapping(pod_metadata.get("annotations"))
    if eviction and ANNOTATION_SAFE_TO_EVICT not in annotations:
        pod_metadata["annotations"] = {**annotations, ANNOTATION_SAFE_TO_EVICT: "true"}
    pod_template["metadata"] = pod_metadata
    pod_template["spec"] = apply_secure_defaults(_mapping(pod_template.get("spec")), template_spec)
    spec["podTemplate"] = pod_template

    return {
        "apiVersion": Sandbox.KIND.api_version,
        "kind": Sandbox.KIND.kind,
        "metadata": {
            "generateName": f"{pool_name}-",
            "namespace": str(pool_metadata.get("namespace") or ""),
            "labels": {
                **system_labels,
                LABEL_LAUNCH_TYPE: LAUNCH_TYPE_WARM,
                LABEL_CREATED_BY: CREATED_BY_CONTROLLER,
            },
            "annotations": {ANNOTATION_SANDBOX_TEMPLATE_REF: ref},
            "ownerReferences": [
                controller_reference(
                    SandboxWarmPool.KIND.api_version,
                    SandboxWarmPool.KIND.kind,
                    pool_name,
                    str(pool_metadata.get("uid") or ""),
                )
            ],
        },
        "spec": spec,
    }


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
