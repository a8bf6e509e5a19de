"""``cold_sandbox``: the Sandbox a claim creates when it adopts no warm one (docs/agent-sandbox.md
§3.4 "Cold create"; upstream ``createSandbox``, claim:1678-1839).

- Name and namespace are the claim's, not a generated name: a claim has at most one cold
  Sandbox, and a second create in a later pass fails with AlreadyExists instead of making a
  twin (§11 item 4).
- Labels: ``claim-uid``, the claim's raw ``created-by`` (absent when the claim has none),
  ``launch-type=cold`` and ``sandbox-template-ref-hash``; annotations: the claim's
  ``opentelemetry.io/trace-context`` (when it has one) and ``sandbox-template-ref``.
- Spec: a deep copy of the template's SandboxBlueprint fields
  (:data:`~services.domain.agentsandbox.blueprint.BLUEPRINT_FIELDS`, so the pool and the claim
  copy the same ones) and nothing else of the template. Then, in upstream's order, which
  decides the error reported when a claim has several problems: the claim's volume claim
  templates merged per policy
  (:mod:`.injection`), the pod metadata of :func:`~.metadata.claim_pod_metadata` (strict), the
  claim's env injected, the template's secure defaults
  (:func:`~services.domain.agentsandbox.secure_defaults.apply_secure_defaults`). ``operatingMode``,
  ``shutdownTime`` and ``shutdownPolicy`` are left unset: the CRD defaults apply, and the
  claim's own ``lifecycle`` is never copied (§11 item 9).
- Owner: the claim, as controller with ``blockOwnerDeletion``, so that deleting the claim
  deletes the Sandbox through the garbage collector (there are no finalizers).

The claim's ``additionalPodMetadata`` must have passed
:func:`~.metadata.validate_additional_metadata` first, as every claim reconcile does before it
looks for a sandbox.

A Sandbox the CRD would refuse is not attempted: a claim named longer than 63 characters whose
template sets ``service: true`` would name a Service that cannot exist (upstream v1.0.6's CEL
rule at the root of the Sandbox CRD refuses it). Upstream's create fails with a 422 and the claim
retries it with backoff; here the claim reports Ready=False/``InvalidConfiguration``, the reason
its Sandbox would carry, terminal until the claim or the template changes, so that the SDK
fails fast.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from api.agents import (
    REASON_INVALID_CONFIGURATION,
    SERVICE_NAME_MAX_LENGTH,
    Sandbox,
    SandboxClaim,
    service_name_too_long,
)
from api.keys import (
    ANNOTATION_SANDBOX_TEMPLATE_REF,
    ANNOTATION_TRACE_CONTEXT,
    LABEL_CLAIM_UID,
    LABEL_CREATED_BY,
    LABEL_LAUNCH_TYPE,
    LABEL_SANDBOX_TEMPLATE_REF_HASH,
    LAUNCH_TYPE_COLD,
    name_hash,
)
from api.objects import Json, controller_reference, labels_of, metadata_of
from services.claim.core.injection import (
    ClaimInputError,
    go_quote,
    inject_env,
    merge_volume_claim_templates,
)
from services.claim.core.metadata import claim_pod_metadata
from services.domain.agentsandbox.blueprint import BLUEPRINT_FIELDS
from services.domain.agentsandbox.secure_defaults import apply_secure_defaults
from services.domain.agentsandbox.warmpool import template_ref_name

__all__ = ["cold_sandbox"]


def cold_sandbox(
    claim: Mapping[str, Any], pool: Mapping[str, Any], template: Mapping[str, Any]
) -> Json:
    """The body of the Sandbox ``claim`` creates from ``template``, the template of its
    ``pool`` (all three as the API serves them; none is changed). The template is named by its
    own name, as upstream names it; that is the pool's ``sandboxTemplateRef.name`` it was found
    by, which stands in only for a template body without a name.

    Raises :class:`~.injection.ClaimInputError` when the template's policies refuse the
    claim's env or volume claim templates, and :class:`~.metadata.MetadataConflict` (a
    ClaimInputError with reason ``ReconcilerError``) when the claim's pod metadata contradicts
    the template's, and a ClaimInputError with reason ``InvalidConfiguration`` when the
    Sandbox would need a Service and its name (the claim's) is too long for one.
    """
    claim_metadata = metadata_of(claim)
    claim_name = str(claim_metadata.get("name") or "")
    claim_spec = _mapping(claim.get("spec"))
    template_spec = _mapping(template.get("spec"))
    ref = str(metadata_of(template).get("name") or "") or template_ref_name(pool)

    spec: Json = {
        field: copy.deepcopy(template_spec[field])
        for field in BLUEPRINT_FIELDS
        if template_spec.get(field) is not None
    }
    volume_claim_templates = merge_volume_claim_templates(
        template_spec.get("volumeClaimTemplates"),
        claim_spec.get("volumeClaimTemplates"),
        template_spec.get("volumeClaimTemplatesPolicy"),
    )
    if volume_claim_templates:
        spec["volumeClaimTemplates"] = volume_claim_templates
    pod_template: Json = dict(_mapping(spec.get("podTemplate")))
    pod_template["metadata"] = claim_pod_metadata(template, claim, ref, strict=True)
    pod_spec = inject_env(
        _mapping(pod_template.get("spec")),
        claim_spec.get("env") or (),
        str(template_spec.get("envVarsInjectionPolicy") or ""),
    )
    pod_template["spec"] = apply_secure_defaults(pod_spec, template_spec)
    spec["podTemplate"] = pod_template
    if service_name_too_long(claim_name, spec.get("service")):
        raise ClaimInputError(
            REASON_INVALID_CONFIGURATION,
            f"the Sandbox is named like the claim, {go_quote(claim_name)} ({len(claim_name)} "
            f"characters), and template {go_quote(ref)} sets spec.service to true: a Service "
            f"name is at most {SERVICE_NAME_MAX_LENGTH} characters; use a shorter claim name",
        )

    labels = {LABEL_CLAIM_UID: str(claim_metadata.get("uid") or "")}
    created_by = labels_of(claim).get(LABEL_CREATED_BY)
    if created_by:
        labels[LABEL_CREATED_BY] = str(created_by)
    labels[LABEL_LAUNCH_TYPE] = LAUNCH_TYPE_COLD
    labels[LABEL_SANDBOX_TEMPLATE_REF_HASH] = name_hash(ref)

    annotations: Json = {}
    trace_context = _mapping(claim_metadata.get("annotations")).get(ANNOTATION_TRACE_CONTEXT)
    if trace_context is not None:
        annotations[ANNOTATION_TRACE_CONTEXT] = trace_context
    annotations[ANNOTATION_SANDBOX_TEMPLATE_REF] = ref

    return {
        "apiVersion": Sandbox.KIND.api_version,
        "kind": Sandbox.KIND.kind,
        "metadata": {
            "name": claim_name,
            "namespace": str(claim_metadata.get("namespace") or ""),
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                controller_reference(
                    SandboxClaim.KIND.api_version,
                    SandboxClaim.KIND.kind,
                    claim_name,
                    str(claim_metadata.get("uid") or ""),
                )
            ],
        },
        "spec": spec,
    }


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
