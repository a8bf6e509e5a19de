"""The agent-sandbox label and annotation keys, and the name hash that most label values carry.

agent-sandbox controllers find their objects by label selectors, not by owner lookups, and the
values of those labels are hashes of names rather than the names themselves (a Kubernetes label
value is limited to 63 characters; an object name is not). A reimplementation that writes a
different key or a different hash leaves every object created by the Go controller invisible to it,
so the keys live here once, spelled exactly as docs/agent-sandbox.md §10 lists them, and
:func:`name_hash` reproduces the Go ``NameHash`` bit for bit (§4.6).

The OpenSandbox keys live in :mod:`api.opensandbox`: the two API families share no key.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ANNOTATION_CLAIM_FIRST_READY_AT",
    "ANNOTATION_CLIENT_FIRST_REQUESTED_AT",
    "ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT",
    "ANNOTATION_POD_NAME",
    "ANNOTATION_PROPAGATED_ANNOTATIONS",
    "ANNOTATION_PROPAGATED_LABELS",
    "ANNOTATION_SAFE_TO_EVICT",
    "ANNOTATION_SANDBOX_NAME",
    "ANNOTATION_SANDBOX_TEMPLATE_REF",
    "ANNOTATION_TRACE_CONTEXT",
    "ANNOTATION_V1ALPHA1_SANDBOXCLAIM_STATE",
    "ANNOTATION_V1ALPHA1_SANDBOXTEMPLATE_STATE",
    "ANNOTATION_V1ALPHA1_SANDBOXWARMPOOL_STATE",
    "ANNOTATION_V1ALPHA1_SANDBOX_STATE",
    "ANNOTATION_V1BETA1_VOLUME_CLAIM_TEMPLATES_POLICY",
    "ANNOTATION_WEBHOOK_FIRST_OBSERVED_AT",
    "CREATED_BY_CONTROLLER",
    "CREATED_BY_GO_CLIENT",
    "CREATED_BY_PYTHON_CLIENT",
    "CREATED_BY_UNKNOWN",
    "CREATED_BY_VALUES",
    "FIRST_READY_AT_UNKNOWN",
    "LABEL_ADOPTABLE",
    "LABEL_CLAIM_UID",
    "LABEL_CREATED_BY",
    "LABEL_LAUNCH_TYPE",
    "LABEL_SANDBOX_NAME_HASH",
    "LABEL_SANDBOX_POD_TEMPLATE_HASH",
    "LABEL_SANDBOX_TEMPLATE_HASH",
    "LABEL_SANDBOX_TEMPLATE_REF_HASH",
    "LABEL_WARM_POOL_SANDBOX",
    "LAUNCH_TYPE_COLD",
    "LAUNCH_TYPE_WARM",
    "LEGACY_LABEL_SANDBOX_NAME",
    "NETWORK_POLICY_NAME_SUFFIX",
    "SYSTEM_KEY_PREFIXES",
    "name_hash",
    "normalize_created_by",
]

# --- Labels --------------------------------------------------------------------------------------

LABEL_SANDBOX_NAME_HASH: Final = "agents.x-k8s.io/sandbox-name-hash"
"""On a Sandbox's Pod, Service and PVCs: ``name_hash(sandbox.name)``; the core controller's
index."""

LABEL_WARM_POOL_SANDBOX: Final = "agents.x-k8s.io/warm-pool-sandbox"
"""On a pool-owned Sandbox (and its podTemplate, so its Pod): ``name_hash(pool.name)``."""

LABEL_SANDBOX_TEMPLATE_REF_HASH: Final = "agents.x-k8s.io/sandbox-template-ref-hash"
"""``name_hash(template.name)``: on extension-owned Sandboxes, their Pods, and the template
itself."""

LABEL_SANDBOX_TEMPLATE_HASH: Final = "agents.x-k8s.io/sandbox-template-hash"
"""On an unadopted pool Sandbox: the hash of the Go JSON of the template's SandboxBlueprint."""

LABEL_SANDBOX_POD_TEMPLATE_HASH: Final = "agents.x-k8s.io/sandbox-pod-template-hash"
"""Deprecated twin of :data:`LABEL_SANDBOX_TEMPLATE_HASH` over the podTemplate alone."""

LABEL_LAUNCH_TYPE: Final = "agents.x-k8s.io/launch-type"
LAUNCH_TYPE_WARM: Final = "warm"
LAUNCH_TYPE_COLD: Final = "cold"

LABEL_CREATED_BY: Final = "agents.x-k8s.io/created-by"
CREATED_BY_GO_CLIENT: Final = "go-client"
CREATED_BY_PYTHON_CLIENT: Final = "python-client"
CREATED_BY_CONTROLLER: Final = "controller"
CREATED_BY_UNKNOWN: Final = "unknown"
CREATED_BY_VALUES: Final = frozenset(
    {CREATED_BY_GO_CLIENT, CREATED_BY_PYTHON_CLIENT, CREATED_BY_CONTROLLER}
)
"""The values that survive normalisation onto a Pod; anything else becomes ``unknown``."""


def normalize_created_by(value: str) -> str:
    """The ``created-by`` value a Pod carries for a Sandbox labelled ``value``."""
    return value if value in CREATED_BY_VALUES else CREATED_BY_UNKNOWN


LABEL_CLAIM_UID: Final = "agents.x-k8s.io/claim-uid"
"""On a claim-owned Sandbox and its podTemplate (never on the Pod): the claim's UID."""

LABEL_ADOPTABLE: Final = "agents.x-k8s.io/adoptable"
"""``"true"`` on a pre-provisioned Pod, Service or PVC authorises the controller to adopt it."""

# --- Annotations ---------------------------------------------------------------------------------

ANNOTATION_SANDBOX_NAME: Final = "agents.x-k8s.io/sandbox-name"
"""On a claim: the Sandbox assigned to it."""

LEGACY_LABEL_SANDBOX_NAME: Final = ANNOTATION_SANDBOX_NAME
"""Older controllers wrote the same key as a *label*; it is migrated to the annotation."""

ANNOTATION_POD_NAME: Final = "agents.x-k8s.io/pod-name"
"""On a Sandbox: the backing Pod's name when it is not the Sandbox's own name (adoption)."""

ANNOTATION_SANDBOX_TEMPLATE_REF: Final = "agents.x-k8s.io/sandbox-template-ref"
"""On a Sandbox: the name of the template it came from."""

ANNOTATION_PROPAGATED_LABELS: Final = "agents.x-k8s.io/propagated-labels"
ANNOTATION_PROPAGATED_ANNOTATIONS: Final = "agents.x-k8s.io/propagated-annotations"
"""On a Pod: the sorted, comma-joined user keys copied from the podTemplate, so that keys later
dropped from the template can be removed from the Pod."""

ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT: Final = "agents.x-k8s.io/controller-first-observed-at"
ANNOTATION_CLAIM_FIRST_READY_AT: Final = "agents.x-k8s.io/claim-first-ready-at"
ANNOTATION_CLIENT_FIRST_REQUESTED_AT: Final = "agents.x-k8s.io/client-first-requested-at"
ANNOTATION_WEBHOOK_FIRST_OBSERVED_AT: Final = "agents.x-k8s.io/webhook-first-observed-at"
FIRST_READY_AT_UNKNOWN: Final = "unknown"
"""Sentinel written into :data:`ANNOTATION_CLAIM_FIRST_READY_AT` when the real time was lost."""

ANNOTATION_TRACE_CONTEXT: Final = "opentelemetry.io/trace-context"
"""A JSON W3C trace-context carrier on claims and Sandboxes; never copied onto a Pod."""

ANNOTATION_SAFE_TO_EVICT: Final = "cluster-autoscaler.kubernetes.io/safe-to-evict"
"""``"true"`` on a warm pool member's podTemplate until it is adopted."""

ANNOTATION_V1ALPHA1_SANDBOX_STATE: Final = "api.agents.x-k8s.io/v1alpha1-sandbox-state"
ANNOTATION_V1ALPHA1_SANDBOXCLAIM_STATE: Final = "api.agents.x-k8s.io/v1alpha1-sandboxclaim-state"
ANNOTATION_V1ALPHA1_SANDBOXTEMPLATE_STATE: Final = (
    "api.agents.x-k8s.io/v1alpha1-sandboxtemplate-state"
)
ANNOTATION_V1ALPHA1_SANDBOXWARMPOOL_STATE: Final = (
    "api.agents.x-k8s.io/v1alpha1-sandboxwarmpool-state"
)
ANNOTATION_V1BETA1_VOLUME_CLAIM_TEMPLATES_POLICY: Final = (
    "api.agents.x-k8s.io/v1beta1-volume-claim-templates-policy"
)
"""Conversion round-trip state left on objects written through the deprecated v1alpha1 API."""

# --- Prefixes and names --------------------------------------------------------------------------

SYSTEM_KEY_PREFIXES: Final = ("agents.x-k8s.io/", "extensions.agents.x-k8s.io/")
"""Label and annotation keys under these prefixes in a user's podTemplate never reach the Pod."""

NETWORK_POLICY_NAME_SUFFIX: Final = "-network-policy"
"""``<template>-network-policy`` is a template's shared NetworkPolicy (``<claim>-…`` is legacy)."""

# --- The name hash -------------------------------------------------------------------------------

_FNV32_OFFSET_BASIS: Final = 0x811C9DC5
_FNV32_PRIME: Final = 0x01000193
_UINT32_MASK: Final = 0xFFFFFFFF


def name_hash(s: str) -> str:
    """The agent-sandbox ``NameHash``: 32-bit FNV-1a over the UTF-8 bytes of ``s``, rendered as
    exactly 8 lowercase hex digits, zero-padded (Go's ``%08x``).

    Label values use it for names (``sandbox-name-hash``, ``warm-pool-sandbox``,
    ``sandbox-template-ref-hash``). The two template hash labels apply the same function to a
    JSON document instead of a name: ``sandbox-template-hash`` hashes Go's ``json.Marshal`` of the
    template's SandboxBlueprint, the deprecated ``sandbox-pod-template-hash`` that of its
    podTemplate (docs/agent-sandbox.md §4.6). Producing those bytes exactly as Go does (struct
    field order, ``spec`` before ``metadata``, HTML escaping) is the pool worker's job; this
    function only hashes the string it is given.
    """
    h = _FNV32_OFFSET_BASIS
    for byte in s.encode("utf-8"):
        h = ((h ^ byte) * _FNV32_PRIME) & _UINT32_MASK
    return f"{h:08x}"
