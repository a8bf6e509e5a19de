"""The agent-sandbox API, version v1beta1: Sandbox (``agents.x-k8s.io``) and SandboxTemplate,
SandboxClaim and SandboxWarmPool (``extensions.agents.x-k8s.io``).

The types follow docs/agent-sandbox.md §1 field for field, defaults and validation included,
because the Python and Go SDKs and the upstream e2e manifests write these objects: a field we
lacked would be pruned by the API server, a validation we added would reject what upstream
accepts. Only v1beta1 is served (the storage version; every current client uses it), so there is
no conversion and none of the v1alpha1 state annotations.

The embedded Kubernetes types (PodSpec, PersistentVolumeClaimSpec, NetworkPolicy rules) are
:data:`~api.meta.Embedded`: the CRD keeps whatever a client writes there instead of carrying the
~4000-line PodSpec schema. Consequence: the API server does not apply PodSpec's own defaults (a
container port's ``protocol: TCP``) inside a pod template; code that hashes a template the way
the Go controller does must apply them itself.

Struct field order is the Go struct order, because the template hashes of §4.6 are computed over
JSON in that order (``podTemplate.spec`` before ``podTemplate.metadata``).
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

import msgspec

from api.meta import (
    ATOMIC,
    Condition,
    DateTime,
    Embedded,
    Int32,
    Int64,
    KindInfo,
    PrinterColumn,
    Resource,
    ScaleSubresource,
    Spec,
    cel,
)

__all__ = [
    "EXTENSIONS_GROUP",
    "GROUP",
    "REASON_INVALID_CONFIGURATION",
    "SERVICE_NAME_LENGTH",
    "SERVICE_NAME_MAX_LENGTH",
    "VERSION",
    "ClaimEnvVar",
    "ClaimLifecycle",
    "ClaimSandboxStatus",
    "ClaimShutdownPolicy",
    "EmbeddedObjectMetadata",
    "EnvVarsInjectionPolicy",
    "NetworkPolicyManagement",
    "NetworkPolicySpec",
    "OperatingMode",
    "PersistentVolumeClaimTemplate",
    "PodMetadata",
    "PodTemplate",
    "Sandbox",
    "SandboxBlueprint",
    "SandboxClaim",
    "SandboxClaimSpec",
    "SandboxClaimStatus",
    "SandboxSpec",
    "SandboxStatus",
    "SandboxTemplate",
    "SandboxTemplateRef",
    "SandboxTemplateSpec",
    "SandboxWarmPool",
    "SandboxWarmPoolRef",
    "SandboxWarmPoolSpec",
    "SandboxWarmPoolStatus",
    "ShutdownPolicy",
    "UpdateStrategyType",
    "VolumeClaimTemplatesPolicy",
    "WarmPoolUpdateStrategy",
    "service_name_too_long",
]

GROUP: Final = "agents.x-k8s.io"
EXTENSIONS_GROUP: Final = "extensions.agents.x-k8s.io"
VERSION: Final = "v1beta1"

_READY_STATUS = PrinterColumn(
    name="Ready", type="string", json_path=".status.conditions[?(@.type=='Ready')].status"
)
_READY_REASON = PrinterColumn(
    name="Reason", type="string", json_path=".status.conditions[?(@.type=='Ready')].reason"
)
_AGE = PrinterColumn(name="Age", type="date", json_path=".metadata.creationTimestamp")

NonNegativeInt32 = Annotated[Int32, msgspec.Meta(ge=0)]


# --- The blueprint shared by Sandbox and SandboxTemplate -----------------------------------------


class PodMetadata(Spec, kw_only=True):
    """Labels and annotations of the pod. Only these two metadata fields are used."""

    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class PodTemplate(Spec, kw_only=True):
    """The pod the sandbox runs: a PodSpec and the pod's labels and annotations."""

    spec: Embedded
    metadata: PodMetadata | None = None


class EmbeddedObjectMetadata(Spec, kw_only=True):
    """Name, labels and annotations of an object created from a template."""

    name: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class PersistentVolumeClaimTemplate(Spec, kw_only=True):
    """A PVC created for the sandbox; the pod may reference it by the template's name."""

    metadata: EmbeddedObjectMetadata | None = None
    spec: Embedded


class SandboxBlueprint(Spec, kw_only=True):
    """The workload configuration shared by Sandbox and SandboxTemplate."""

    pod_template: PodTemplate
    volume_claim_templates: Annotated[list[PersistentVolumeClaimTemplate], ATOMIC] | None = None
    service: bool | None = None
    """Unset: keep a Service that already exists but create none; true: create a headless
    Service; false: delete the Service the sandbox owns."""


# --- Sandbox -------------------------------------------------------------------------------------

ShutdownPolicy = Literal["Delete", "Retain"]
OperatingMode = Literal["Running", "Suspended"]


class SandboxSpec(SandboxBlueprint, kw_only=True):
    """The desired state of a Sandbox."""

    shutdown_time: DateTime | None = None
    """The absolute time at which the sandbox expires."""
    shutdown_policy: ShutdownPolicy = "Retain"
    """On expiry, Retain keeps the Sandbox (Ready=False, SandboxExpired); Delete deletes it.
    The pod and Service are deleted either way."""
    operating_mode: OperatingMode = "Running"
    """Suspended deletes the pod but keeps the Sandbox, its Service and its PVCs."""


VOLUME_CLAIM_TEMPLATES_IMMUTABLE = cel(
    rule=(
        "has(self.volumeClaimTemplates) == has(oldSelf.volumeClaimTemplates) && "
        "(!has(self.volumeClaimTemplates) || "
        "self.volumeClaimTemplates == oldSelf.volumeClaimTemplates)"
    ),
    message="volumeClaimTemplates is immutable",
)


SERVICE_NAME_MAX_LENGTH: Final = 63
"""A Sandbox's Service is named like the Sandbox, and a Service name is a DNS label."""

REASON_INVALID_CONFIGURATION: Final = "InvalidConfiguration"
"""The Sandbox's Ready=False reason for a spec the controller cannot act on (upstream v1.0.4):
terminal, nothing is retried until the spec changes. A claim forwards it, and the SDK fails fast
on it."""


SERVICE_NAME_LENGTH: Final = (
    "!has(self.spec.service) || !self.spec.service || "
    f"size(self.metadata.name) <= {SERVICE_NAME_MAX_LENGTH}",
    f"metadata.name must be at most {SERVICE_NAME_MAX_LENGTH} characters when spec.service is "
    "true: the Sandbox's Service takes its name",
)
"""The rule at the root of the Sandbox CRD (upstream v1.0.6): with ``spec.service`` true, the
name must fit a Service's, which is a DNS label; without, any object name will do. On an update
too, so turning the Service on under a long name is refused."""


def service_name_too_long(name: str, service: bool | None) -> bool:
    """Whether a Sandbox of this name and ``spec.service`` is one :data:`SERVICE_NAME_LENGTH`
    refuses."""
    return service is True and len(name) > SERVICE_NAME_MAX_LENGTH


class SandboxStatus(Spec, kw_only=True):
    """The observed state of a Sandbox."""

    service_fqdn: str | None = msgspec.field(default=None, name="serviceFQDN")
    service: str | None = None
    conditions: list[Condition] | None = None
    selector: str | None = None
    """The label selector of the sandbox's pod; the SDK reads the name hash from it."""
    pod_ips: list[str] | None = msgspec.field(default=None, name="podIPs")
    node_name: str | None = None


class Sandbox(Resource, kw_only=True):
    """A single stateful pod with a stable identity, optional Service and PVCs, and a lifetime."""

    KIND = KindInfo(
        group=GROUP,
        version=VERSION,
        kind="Sandbox",
        plural="sandboxes",
        singular="sandbox",
        short_names=("sandbox",),
        printer_columns=(_READY_STATUS, _READY_REASON, _AGE),
        validations=(SERVICE_NAME_LENGTH,),
    )

    spec: Annotated[SandboxSpec, VOLUME_CLAIM_TEMPLATES_IMMUTABLE]
    status: SandboxStatus | None = None


# --- SandboxTemplate -----------------------------------------------------------------------------

NetworkPolicyManagement = Literal["Managed", "Unmanaged"]
EnvVarsInjectionPolicy = Literal["Allowed", "Overrides", "Disallowed"]
VolumeClaimTemplatesPolicy = Literal["Disallowed", "Allowed", "Overrides"]


class NetworkPolicySpec(Spec, kw_only=True):
    """Custom rules for the template's shared NetworkPolicy. Its pod selector and policy types
    belong to the controller; an empty list of rules denies that direction entirely."""

    ingress: list[Embedded] | None = None
    egress: list[Embedded] | None = None


class SandboxTemplateSpec(SandboxBlueprint, kw_only=True):
    """A reusable sandbox blueprint plus the policies that claims against it must respect."""

    network_policy: NetworkPolicySpec | None = None
    network_policy_management: NetworkPolicyManagement = "Managed"
    """Unmanaged: the controller creates no NetworkPolicy and deletes the one it owns."""
    env_vars_injection_policy: EnvVarsInjectionPolicy = "Disallowed"
    """Whether a claim may add (Allowed) or also override (Overrides) environment variables."""
    volume_claim_templates_policy: VolumeClaimTemplatesPolicy = "Disallowed"
    """Whether a claim may add (Allowed) or also override (Overrides) volume claim templates."""


class SandboxTemplate(Resource, kw_only=True):
    """A named sandbox blueprint that warm pools and claims instantiate. It has no status."""

    KIND = KindInfo(
        group=EXTENSIONS_GROUP,
        version=VERSION,
        kind="SandboxTemplate",
        plural="sandboxtemplates",
        singular="sandboxtemplate",
        short_names=("sandboxtemplate",),
        status_subresource=False,
    )

    spec: SandboxTemplateSpec


# --- SandboxClaim --------------------------------------------------------------------------------

ClaimShutdownPolicy = Literal["Delete", "DeleteForeground", "Retain"]


class SandboxWarmPoolRef(Spec, kw_only=True):
    """Names the SandboxWarmPool to take a sandbox from (and, through it, the template)."""

    name: str


class ClaimLifecycle(Spec, kw_only=True):
    """When and how the claim ends. Never copied to the Sandbox."""

    shutdown_time: DateTime | None = None
    ttl_seconds_after_finished: NonNegativeInt32 | None = None
    """Seconds to keep the claim after its Finished condition's lastTransitionTime."""
    shutdown_policy: ClaimShutdownPolicy = "Retain"


class ClaimEnvVar(Spec, kw_only=True):
    """An environment variable for the claimed sandbox; its presence forces a cold start."""

    name: str
    value: str
    container_name: str | None = None
    """The container to set it in; the template's first container when absent."""


class SandboxClaimSpec(Spec, kw_only=True):
    """What a claim asks for: a sandbox from a warm pool, optionally customised."""

    warm_pool_ref: SandboxWarmPoolRef
    lifecycle: ClaimLifecycle | None = None
    additional_pod_metadata: PodMetadata | None = None
    """Labels and annotations merged into the sandbox's pod template."""
    env: Annotated[list[ClaimEnvVar], ATOMIC] | None = None
    volume_claim_templates: Annotated[list[PersistentVolumeClaimTemplate], ATOMIC] | None = None


class ClaimSandboxStatus(Spec, kw_only=True):
    """The sandbox bound to the claim."""

    name: str | None = None
    pod_ips: list[str] | None = msgspec.field(default=None, name="podIPs")


class SandboxClaimStatus(Spec, kw_only=True):
    """The observed state of a SandboxClaim."""

    conditions: list[Condition] | None = None
    sandbox: ClaimSandboxStatus | None = None


class SandboxClaim(Resource, kw_only=True):
    """A request for one sandbox, served from a warm pool or cold-started from its template."""

    KIND = KindInfo(
        group=EXTENSIONS_GROUP,
        version=VERSION,
        kind="SandboxClaim",
        plural="sandboxclaims",
        singular="sandboxclaim",
        short_names=("sandboxclaim",),
        printer_columns=(
            _READY_STATUS,
            PrinterColumn(name="Sandbox", type="string", json_path=".status.sandbox.name"),
            _READY_REASON,
            _AGE,
        ),
    )

    spec: SandboxClaimSpec
    status: SandboxClaimStatus | None = None


# --- SandboxWarmPool -----------------------------------------------------------------------------

UpdateStrategyType = Literal["Recreate", "OnReplenish"]


class SandboxTemplateRef(Spec, kw_only=True):
    """Names the SandboxTemplate the pool's sandboxes are made from."""

    name: str


class WarmPoolUpdateStrategy(Spec, kw_only=True):
    """How pool members that no longer match the template are replaced."""

    type: UpdateStrategyType = "OnReplenish"
    """Recreate deletes stale members at once; OnReplenish replaces them only as they are
    adopted or deleted."""


class SandboxWarmPoolSpec(Spec, kw_only=True):
    """The desired state of a SandboxWarmPool."""

    replicas: NonNegativeInt32 = 1
    """The number of sandboxes the pool keeps; the scale subresource (and an HPA) sets it."""
    sandbox_template_ref: SandboxTemplateRef
    update_strategy: WarmPoolUpdateStrategy | None = None


class SandboxWarmPoolStatus(Spec, kw_only=True):
    """The observed state of a SandboxWarmPool."""

    replicas: Int32 | None = None
    ready_replicas: Int32 | None = None
    selector: str | None = None
    """``agents.x-k8s.io/warm-pool-sandbox=<NameHash(pool name)>``."""
    observed_generation: Annotated[Int64, msgspec.Meta(ge=0)] | None = None
    conditions: list[Condition] | None = None
    """sandbus's own: ``Progressing=False`` while the pool cannot make progress, with the
    reason (docs/conditions.md). Upstream's pool status has none; its Events are the same."""


class SandboxWarmPool(Resource, kw_only=True):
    """A pool of pre-provisioned sandboxes from one template, waiting to be claimed."""

    KIND = KindInfo(
        group=EXTENSIONS_GROUP,
        version=VERSION,
        kind="SandboxWarmPool",
        plural="sandboxwarmpools",
        singular="sandboxwarmpool",
        short_names=("swp",),
        scale=ScaleSubresource(),
        printer_columns=(
            PrinterColumn(name="Ready", type="integer", json_path=".status.readyReplicas"),
            PrinterColumn(name="Desired", type="integer", json_path=".spec.replicas"),
            _AGE,
        ),
    )

    spec: SandboxWarmPoolSpec
    status: SandboxWarmPoolStatus | None = None
