"""The template hashes upstream's Go controllers stamp on what they make, bit for bit.

* ``agents.x-k8s.io/sandbox-template-hash``, on a warm pool's Sandboxes: upstream's
  ``computeSandboxBlueprintHash`` (extensions/controllers/sandboxwarmpool_controller.go) is
  ``NameHash(string(json.Marshal(template.Spec.SandboxBlueprint)))``.
* the deprecated ``agents.x-k8s.io/sandbox-pod-template-hash``: ``computePodTemplateHash``, the
  same over ``template.Spec.PodTemplate``.
* an OpenSandbox Pool's revision: the first 8 bytes of the SHA-256 of
  ``json.Marshal(pool.Spec.Template)``.

Upstream hashes a *typed Go value*; we hold the template as the API server serves it, so the
JSON is re-encoded as Go's ``encoding/json`` would write it after decoding it into the Go types
(:mod:`.gojson`, over the field tables of :mod:`.gofields`). Only the blueprint's three fields
(podTemplate, volumeClaimTemplates, service) are encoded: every other key of a template spec,
such as ``networkPolicy``, is a template-only field.

Where the encoder cannot match Go (a field newer than its tables, input Go could not decode),
the hash differs from the Go controller's label. That only costs label parity: wherever a
template hash disagrees, the pool falls back to comparing the blueprints semantically
(:mod:`.staleness`), so behaviour still converges.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from api.keys import name_hash
from services.domain.agentsandbox.gojson import marshal, marshal_fields

__all__ = [
    "blueprint_hash",
    "blueprint_json",
    "open_pool_revision",
    "pod_template_hash",
    "pod_template_json",
    "pod_template_spec_json",
]


def blueprint_hash(template_spec: Mapping[str, Any]) -> str:
    """``agents.x-k8s.io/sandbox-template-hash``: ``NameHash`` of the Go JSON of the template's
    ``SandboxBlueprint`` (podTemplate, volumeClaimTemplates, service)."""
    return name_hash(blueprint_json(template_spec))


def pod_template_hash(template_spec: Mapping[str, Any]) -> str:
    """The deprecated ``agents.x-k8s.io/sandbox-pod-template-hash``: ``NameHash`` of the Go JSON
    of the template's ``podTemplate`` alone."""
    return name_hash(pod_template_json(template_spec))


def blueprint_json(template_spec: Mapping[str, Any]) -> str:
    """``json.Marshal(template.Spec.SandboxBlueprint)`` as Go writes it, for a template spec as
    the API server serves it. The spec embeds the blueprint, so its other keys are left out."""
    return marshal_fields(template_spec, "v1beta1.SandboxBlueprint")


def pod_template_json(template_spec: Mapping[str, Any]) -> str:
    """``json.Marshal(template.Spec.PodTemplate)`` as Go writes it."""
    return marshal(template_spec.get("podTemplate"), "v1beta1.PodTemplate")


def open_pool_revision(template: Mapping[str, Any] | None) -> str:
    """An OpenSandbox Pool's revision, as its Go controller computes it: the first 8 bytes of
    the SHA-256 of ``json.Marshal(pool.Spec.Template)``, as 16 lower-case hex characters.
    Matching it bit for bit is what lets sandbus take over a Pool without recreating its idle
    Pods once."""
    return hashlib.sha256(pod_template_spec_json(template).encode()).hexdigest()[:16]


def pod_template_spec_json(template: Mapping[str, Any] | None) -> str:
    """``json.Marshal`` of a ``*corev1.PodTemplateSpec`` as OpenSandbox's controller writes it.

    OpenSandbox pins k8s.io/apimachinery v0.33, whose ``ObjectMeta.creationTimestamp`` is
    ``omitempty`` only (``omitzero`` came later): a template without one still says
    ``"metadata":{"creationTimestamp":null}``. A nil template is ``null``."""
    if template is None:
        return "null"
    return marshal(template, "v1.PodTemplateSpec")
