"""A Sandbox's Pod: which Pod it is, whether to create, adopt, relabel or delete it
(docs/agent-sandbox.md §2.3, §2.5, §2.7; upstream ``reconcilePod``).

Finding the Pod. The candidates are the Pods labelled with the Sandbox's name hash and the Pod
named by ``resolvePodName``. The Pods the Sandbox *controls* (owner UID, not the label) decide:
more than one is the MultiplePods error (no Pod is chosen, none created); exactly one that is
not the tracked Pod wins over a stale ``agents.x-k8s.io/pod-name`` annotation, which is
cleared; an annotation naming a Pod that is gone is cleared too.

Running mode. Without a tracked Pod, the Pod named like the Sandbox (the name a new Pod would
take) is the found Pod, as upstream goes on with it after its create gets AlreadyExists. A
found Pod owned by another controller is refused (and the annotation cleared); an unowned one
is adopted only when labelled ``agents.x-k8s.io/adoptable=true`` or already carrying the
name-hash label; an owned one gets its labels and annotations reconciled in place
(the spec of an existing Pod is never changed); a terminating one is left to terminate, and no
second Pod is created beside it. No Pod: a new one named like the Sandbox. Either way the
Sandbox then records the Pod's name in ``agents.x-k8s.io/pod-name`` unless it already tracks
another one.

Suspended mode. The owned Pod is deleted (a foreign one never), and the annotation cleared.

Metadata that reaches the Pod: the template's labels and annotations minus system keys
(``agents.x-k8s.io/…``, ``extensions.agents.x-k8s.io/…``, and the trace-context annotation),
then the name-hash label, the extension labels (``warm-pool-sandbox`` when a SandboxWarmPool
controls the Sandbox, ``sandbox-template-ref-hash`` when any extension controller does), and
the normalised ``created-by``. The user keys are recorded in
``agents.x-k8s.io/propagated-labels``/``-annotations`` so that a key later dropped from the
template is removed from the Pod, and a system key an older controller recorded is scrubbed.

The metadata patch of a Pod the Sandbox already owns is marked ``deferrable``: the next pass
recomputes it from the objects alone, so the optional write-behind window (:mod:`.plan`) may
hold it back. Adopting a Pod (its owner reference) is never deferrable, and it is conditional:
the patch carries the Pod's ``metadata.resourceVersion`` with ``on_conflict="refresh"``, so when
another Sandbox adopted the Pod first the patch gets 409 Conflict and the next pass, on the
fresh Pod, finds it owned by someone else (:mod:`.objects` says which writes are conditional).

For tracing, the plan also says what it saw, as upstream's span events: an existing Pod
(``ExistingPodStatusObserved``) or the one it creates (``NewPodStatusObserved``; a Pod the API
server creates is ``Pending``), each with the Pod's name and phase.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from api.agents import EXTENSIONS_GROUP, GROUP, VERSION, Sandbox, SandboxSpec
from api.keys import (
    ANNOTATION_POD_NAME,
    ANNOTATION_PROPAGATED_ANNOTATIONS,
    ANNOTATION_PROPAGATED_LABELS,
    ANNOTATION_TRACE_CONTEXT,
    LABEL_ADOPTABLE,
    LABEL_CREATED_BY,
    LABEL_SANDBOX_NAME_HASH,
    LABEL_SANDBOX_TEMPLATE_REF_HASH,
    LABEL_WARM_POOL_SANDBOX,
    SYSTEM_KEY_PREFIXES,
    normalize_created_by,
)
from api.objects import (
    Json,
    annotations_of,
    controller_reference,
    is_deleting,
    labels_of,
    metadata_of,
    name_of,
    resource_version_of,
    uid_of,
)
from api.patching.merge import merge_patch
from events.envelope import ObjectKey
from services.runtime.reconcile.actions import Action, Create, Delete, Patch, SpanEvent
from services.sandbox.core.objects import (
    Ownership,
    adoptable,
    owned_by_other_message,
    ownership,
    with_controller,
)
from services.sandbox.core.status import PodFinding

__all__ = [
    "EVENT_EXISTING_POD",
    "EVENT_NEW_POD",
    "EXTENSION_LABELS",
    "PodPlan",
    "desired_pod_metadata",
    "extension_labels",
    "merge_volume_claim_volumes",
    "new_pod",
    "plan_pod",
    "sandbox_reference",
]

EVENT_EXISTING_POD = "ExistingPodStatusObserved"
EVENT_NEW_POD = "NewPodStatusObserved"

EXTENSION_LABELS = (LABEL_WARM_POOL_SANDBOX, LABEL_SANDBOX_TEMPLATE_REF_HASH)
"""The extension labels the core controller manages on a Pod (and removes when not expected)."""

_CONTROLLER_MANAGED_ANNOTATIONS = frozenset(
    {ANNOTATION_PROPAGATED_LABELS, ANNOTATION_PROPAGATED_ANNOTATIONS}
)


def _system_label(key: str) -> bool:
    return key.startswith(SYSTEM_KEY_PREFIXES)


def _system_annotation(key: str) -> bool:
    return key.startswith(SYSTEM_KEY_PREFIXES) or key == ANNOTATION_TRACE_CONTEXT


def sandbox_reference(sandbox: Sandbox) -> Json:
    return controller_reference(
        f"{GROUP}/{VERSION}",
        "Sandbox",
        sandbox.metadata.name or "",
        sandbox.metadata.uid or "",
    )


def extension_labels(sandbox: Sandbox) -> dict[str, str]:
    """The extension labels the Pod should carry: only when an extensions controller
    (SandboxClaim, SandboxWarmPool) controls the Sandbox, copied from the Sandbox's labels."""
    controller = next(
        (ref for ref in sandbox.metadata.owner_references or () if ref.controller), None
    )
    if controller is None or controller.api_version.split("/")[0] != EXTENSIONS_GROUP:
        return {}
    labels = sandbox.metadata.labels or {}
    expected: dict[str, str] = {}
    pool_hash = labels.get(LABEL_WARM_POOL_SANDBOX)
    if controller.kind == "SandboxWarmPool" and pool_hash:
        expected[LABEL_WARM_POOL_SANDBOX] = pool_hash
    template_hash = labels.get(LABEL_SANDBOX_TEMPLATE_REF_HASH)
    if template_hash:
        expected[LABEL_SANDBOX_TEMPLATE_REF_HASH] = template_hash
    return expected


def _expected_created_by(sandbox: Sandbox) -> str | None:
    value = (sandbox.metadata.labels or {}).get(LABEL_CREATED_BY)
    return normalize_created_by(value) if value else None


def _template_metadata(spec: SandboxSpec) -> tuple[dict[str, str], dict[str, str]]:
    metadata = spec.pod_template.metadata
    labels = dict(metadata.labels or {}) if metadata else {}
    annotations = dict(metadata.annotations or {}) if metadata else {}
    return labels, annotations


def _propagated(annotations: Mapping[str, str], key: str) -> list[str]:
    return [item for item in (annotations.get(key) or "").split(",") if item]


def desired_pod_metadata(
    pod: Mapping[str, Any], sandbox: Sandbox, name_hash: str
) -> tuple[dict[str, str], dict[str, str]]:
    """The labels and annotations an existing Pod should have (upstream ``updatePodMetadata``)."""
    labels = dict(labels_of(pod))
    annotations = dict(annotations_of(pod))
    template_labels, template_annotations = _template_metadata(sandbox.spec)

    labels[LABEL_SANDBOX_NAME_HASH] = name_hash
    managed_labels = []
    for key, value in template_labels.items():
        if _system_label(key):
            continue
        labels[key] = value
        managed_labels.append(key)
    for key in _propagated(annotations, ANNOTATION_PROPAGATED_LABELS):
        if _system_label(key):
            # Recorded by an older controller that let the template set system labels: scrub,
            # except the name-hash label, which is ours.
            if key != LABEL_SANDBOX_NAME_HASH:
                labels.pop(key, None)
        elif key not in template_labels:
            labels.pop(key, None)
    expected = extension_labels(sandbox)
    for key in EXTENSION_LABELS:
        if key in expected:
            labels[key] = expected[key]
        else:
            labels.pop(key, None)
    created_by = _expected_created_by(sandbox)
    if created_by is not None:
        labels[LABEL_CREATED_BY] = created_by
    else:
        labels.pop(LABEL_CREATED_BY, None)

    managed_annotations = []
    for key, value in template_annotations.items():
        if _system_annotation(key):
            continue
        annotations[key] = value
        managed_annotations.append(key)
    for key in _propagated(annotations, ANNOTATION_PROPAGATED_ANNOTATIONS):
        if _system_annotation(key):
            if key not in _CONTROLLER_MANAGED_ANNOTATIONS:
                annotations.pop(key, None)
        elif key not in template_annotations:
            annotations.pop(key, None)
    # Like upstream, the bookkeeping is rewritten whenever it differs, even to "" once the
    # template has no user keys left (an absent annotation already reads as "").
    for key, keys in (
        (ANNOTATION_PROPAGATED_LABELS, managed_labels),
        (ANNOTATION_PROPAGATED_ANNOTATIONS, managed_annotations),
    ):
        joined = ",".join(sorted(keys))
        if annotations.get(key, "") != joined:
            annotations[key] = joined
    return labels, annotations


def merge_volume_claim_volumes(volumes: list[Any], claim_volumes: list[Json]) -> list[Any]:
    """StatefulSet semantics: a volume claim template's volume replaces a pod volume of the same
    name and is appended at the end; without claim volumes the list is left as it is."""
    if not claim_volumes:
        return volumes
    names = {volume["name"] for volume in claim_volumes}
    kept = [
        volume
        for volume in volumes
        if not (isinstance(volume, Mapping) and volume.get("name") in names)
    ]
    return kept + claim_volumes


def new_pod(sandbox: Sandbox, name_hash: str) -> Json:
    """The Pod a Sandbox creates: named like it, in its namespace, controlled by it."""
    name = sandbox.metadata.name or ""
    template_labels, template_annotations = _template_metadata(sandbox.spec)
    user_labels = {k: v for k, v in template_labels.items() if not _system_label(k)}
    user_annotations = {k: v for k, v in template_annotations.items() if not _system_annotation(k)}
    labels = {**user_labels, LABEL_SANDBOX_NAME_HASH: name_hash, **extension_labels(sandbox)}
    created_by = _expected_created_by(sandbox)
    if created_by is not None:
        labels[LABEL_CREATED_BY] = created_by
    annotations = dict(user_annotations)
    if user_labels:
        annotations[ANNOTATION_PROPAGATED_LABELS] = ",".join(sorted(user_labels))
    if user_annotations:
        annotations[ANNOTATION_PROPAGATED_ANNOTATIONS] = ",".join(sorted(user_annotations))
    spec = copy.deepcopy(sandbox.spec.pod_template.spec)
    claim_volumes = [
        {
            "name": template.metadata.name,
            "persistentVolumeClaim": {"claimName": f"{template.metadata.name}-{name}"},
        }
        for template in sandbox.spec.volume_claim_templates or ()
        if template.metadata and template.metadata.name
    ]
    volumes = merge_volume_claim_volumes(list(spec.get("volumes") or []), claim_volumes)
    if volumes:
        spec["volumes"] = volumes
    metadata: Json = {
        "name": name,
        "namespace": sandbox.metadata.namespace,
        "labels": labels,
        "ownerReferences": [sandbox_reference(sandbox)],
    }
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


_KEEP: Any = object()


@dataclass(frozen=True)
class PodPlan:
    finding: PodFinding
    actions: tuple[Action, ...] = ()
    pod_name_annotation: str | None = field(default=_KEEP)
    """The value ``agents.x-k8s.io/pod-name`` should have (None: removed); unchanged when it
    is the sentinel :data:`_KEEP` (test with :meth:`changes_annotation`)."""
    deferrable: bool = False
    """``actions`` is only the metadata patch of a Pod the Sandbox owns (see the module)."""
    events: tuple[SpanEvent, ...] = ()

    @property
    def changes_annotation(self) -> bool:
        return self.pod_name_annotation is not _KEEP


def plan_pod(sandbox: Sandbox, pods: tuple[Json, ...], name_hash: str) -> PodPlan:
    """The pod part of a pass (upstream ``reconcilePod``); ``pods`` are the candidates."""
    name = sandbox.metadata.name or ""
    namespace = sandbox.metadata.namespace or ""
    uid = sandbox.metadata.uid or ""
    current_annotation = (sandbox.metadata.annotations or {}).get(ANNOTATION_POD_NAME)
    annotation: str | None = current_annotation
    tracked_name = current_annotation or name
    by_name = {name_of(pod): pod for pod in pods}
    tracked = by_name.get(tracked_name)
    if tracked is None and annotation is not None:
        annotation = None  # the annotated Pod is gone: forget it
    owned = [pod for pod in pods if ownership(pod, uid) is Ownership.OWNED]

    events: tuple[SpanEvent, ...] = ()

    def result(finding: PodFinding, *actions: Action, deferrable: bool = False) -> PodPlan:
        if annotation == current_annotation:
            return PodPlan(finding, actions, deferrable=deferrable, events=events)
        return PodPlan(finding, actions, annotation, deferrable=deferrable, events=events)

    if len(owned) > 1:
        return result(
            PodFinding(
                error=(
                    f"multiple Pods ({len(owned)}) are controlled by this Sandbox; "
                    "refusing to choose or create a Pod"
                ),
                multiple=True,
            )
        )
    pod = tracked
    if owned and (tracked is None or name_of(tracked) != name_of(owned[0])):
        annotation = None  # the owner UID beats a stale annotation
        pod = owned[0]

    if sandbox.spec.operating_mode == "Suspended":
        annotation = None
        if pod is None:
            return result(PodFinding())
        if ownership(pod, uid) is not Ownership.OWNED:
            return result(PodFinding(pod=pod, owned=False))
        if is_deleting(pod):
            return result(PodFinding(pod=pod, owned=True))
        return result(
            PodFinding(pod=pod, owned=True),
            Delete(
                target=ObjectKey("Pod", namespace, name_of(pod)),
                uid=uid_of(pod),
                why="the Sandbox is suspended",
            ),
        )

    if pod is None:
        # The name a new Pod gets may be taken by a Pod the Sandbox does not track (the
        # annotation named another one). Upstream's create gets AlreadyExists, reads that Pod
        # and goes on with it; so does the planner, instead of a create that would fail the
        # same way at every pass.
        pod = by_name.get(name)
    if pod is None:
        events = (_observed(EVENT_NEW_POD, name, "Pending"),)
        # Until the API server answers, there is no Pod to report on.
        return result(PodFinding(), Create(new_pod(sandbox, name_hash), why="create the Pod"))

    events = (_observed(EVENT_EXISTING_POD, name_of(pod), _phase(pod)),)
    owner = ownership(pod, uid)
    if owner is Ownership.OTHER:
        annotation = None
        return result(PodFinding(error=owned_by_other_message("pod", pod, name)))
    references = None
    if owner is Ownership.UNOWNED:
        if not adoptable(pod, name_hash):
            return result(
                PodFinding(
                    error=(
                        f'cannot adopt unowned pod "{name_of(pod)}": missing required pool '
                        f'authorization label ("{LABEL_ADOPTABLE}") or sandbox tracking label '
                        f'("{LABEL_SANDBOX_NAME_HASH}")'
                    )
                )
            )
        references = with_controller(pod, sandbox_reference(sandbox))
    labels, annotations = desired_pod_metadata(pod, sandbox, name_hash)
    before: Json = {"labels": dict(labels_of(pod)), "annotations": dict(annotations_of(pod))}
    after: Json = {"labels": labels, "annotations": annotations}
    if references is not None:
        before["ownerReferences"] = metadata_of(pod).get("ownerReferences") or []
        after["ownerReferences"] = references
    actions: list[Action] = []
    patch = merge_patch(before, after)
    target = ObjectKey("Pod", namespace, name_of(pod))
    if references is not None:
        # Another Sandbox may be adopting the same Pod: only the version it was planned on
        # may be adopted (see :mod:`.objects`).
        patch["resourceVersion"] = resource_version_of(pod)
        actions.append(
            Patch(target, {"metadata": patch}, why="adopt the Pod", on_conflict="refresh")
        )
    elif patch:
        actions.append(Patch(target, {"metadata": patch}, why="reconcile the Pod's labels"))
    if not annotation and name_of(pod) != name:
        annotation = name_of(pod)
    return result(
        PodFinding(pod=pod, owned=True), *actions, deferrable=bool(actions) and references is None
    )


def _phase(pod: Json) -> str:
    status = pod.get("status")
    return str(status.get("phase") or "") if isinstance(status, Mapping) else ""


def _observed(event: str, pod_name: str, phase: str) -> SpanEvent:
    return SpanEvent(event, {"pod.Name": pod_name, "pod.Phase": phase})
