"""A Sandbox's status: its conditions with every reason and message of docs/agent-sandbox.md §2.6,
the fields mirrored from its Pod and Service, and when a changed status is worth a write.

Conditions are computed from what the pod reconcile found (:class:`PodFinding`), the errors
of the pass and the Service, then upserted the way ``meta.SetStatusCondition`` does: a
condition keeps its place and its ``lastTransitionTime`` unless its status changes, and a new
one is appended. The order of first insertion is Suspended, Finished, PodScheduled, Ready.
``Suspended`` and ``Ready`` are always present; ``Finished`` only while an owned Pod is
terminal and ``PodScheduled`` only while an owned Pod exists (or its state is unknown): they are
removed otherwise.

The status is written with a JSON merge patch on ``/status`` without a resourceVersion
precondition (the worker is the only writer of a Sandbox's status), and only when it changed;
a change of ``nodeName`` alone is not written while the Sandbox is not Ready, because it rides
along with the write that follows a moment later (upstream ``nodeNameOnlyChange``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import msgspec

from api.agents import Sandbox, SandboxStatus
from api.keys import LABEL_SANDBOX_NAME_HASH
from api.meta import Condition
from api.objects import Json, condition_of
from api.patching.merge import merge_patch
from events.envelope import ObjectKey
from services.runtime.reconcile.actions import Patch

__all__ = [
    "CONDITION_FINISHED",
    "CONDITION_POD_SCHEDULED",
    "CONDITION_READY",
    "CONDITION_SUSPENDED",
    "REASON_DEPENDENCIES_NOT_READY",
    "ConditionValue",
    "PodFinding",
    "compute_conditions",
    "condition",
    "expired_ready",
    "only_progress",
    "rfc3339",
    "set_conditions",
    "status_patch",
    "with_pod_fields",
    "with_service_fields",
]

CONDITION_SUSPENDED = "Suspended"
CONDITION_FINISHED = "Finished"
CONDITION_POD_SCHEDULED = "PodScheduled"
CONDITION_READY = "Ready"
REASON_DEPENDENCIES_NOT_READY = "DependenciesNotReady"

Status = Literal["True", "False", "Unknown"]


@dataclass(frozen=True)
class ConditionValue:
    """A condition as computed, before it is upserted (which adds the time and generation)."""

    type: str
    status: Status
    reason: str
    message: str


@dataclass(frozen=True)
class PodFinding:
    """What the pod reconcile of this pass found.

    ``pod`` is the Pod the Sandbox maps to (also a foreign one, in Suspended mode, which the
    Sandbox refuses to delete), ``owned`` whether the Sandbox controls it, and ``error`` why no
    Pod could be determined (then ``pod`` is None). ``multiple`` marks the MultiplePods error.
    """

    pod: Json | None = None
    owned: bool = False
    error: str | None = None
    multiple: bool = False


def rfc3339(moment: datetime) -> str:
    """A ``metav1.Time``: UTC, whole seconds."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(sandbox: Sandbox, kind: str) -> Condition | None:
    for existing in (sandbox.status.conditions if sandbox.status else None) or ():
        if existing.type == kind:
            return existing
    return None


# --- the conditions -------------------------------------------------------------------------


def _pod_status(pod: Mapping[str, Any] | None) -> Mapping[str, Any]:
    status = pod.get("status") if pod is not None else None
    return status if isinstance(status, Mapping) else {}


def _phase(pod: Mapping[str, Any] | None) -> str:
    return str(_pod_status(pod).get("phase") or "")


def pod_ips(pod: Mapping[str, Any]) -> list[str]:
    return [
        str(entry["ip"])
        for entry in _pod_status(pod).get("podIPs") or ()
        if isinstance(entry, Mapping) and entry.get("ip")
    ]


_IDENTITY: tuple[str, ...] = (
    "uid",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
)
"""The metadata a pass reads of a Pod, besides its deletion (the rest changes with every
write: resourceVersion, managedFields)."""


def _on_its_way(pod: Mapping[str, Any]) -> bool:
    """A live Pod that has neither become Ready nor ended, and that the scheduler has not
    turned down nor gates hold (``PodScheduled=False``: it is stuck, not on its way)."""
    metadata = pod.get("metadata") or {}
    ready = condition_of(pod, "Ready")
    scheduled = condition_of(pod, "PodScheduled")
    return (
        not metadata.get("deletionTimestamp")
        and _phase(pod) in ("", "Pending", "Running")
        and (ready is None or ready.get("status") != "True")
        and (scheduled is None or scheduled.get("status") != "False")
    )


def only_progress(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """Whether a change of a Pod only moves it along its way to Ready: it was and is on its
    way, and nothing changed but its status and its node (scheduled). Such a change is news to
    nothing but the Sandbox's status, whose report of a starting Pod the status window holds
    back anyway; readiness, an ending, a deletion or a change of its metadata or spec is not."""
    if not (_on_its_way(before) and _on_its_way(after)):
        return False
    old, new = before.get("metadata") or {}, after.get("metadata") or {}
    if any(old.get(field) != new.get(field) for field in _IDENTITY):
        return False
    old_spec, new_spec = before.get("spec") or {}, after.get("spec") or {}
    return {**old_spec, "nodeName": None} == {**new_spec, "nodeName": None}


def _suspended(sandbox: Sandbox, finding: PodFinding) -> ConditionValue:
    def value(status: Status, reason: str, message: str) -> ConditionValue:
        return ConditionValue(CONDITION_SUSPENDED, status, reason, message)

    if sandbox.spec.operating_mode != "Suspended":
        return value("False", "NotSuspended", "Sandbox is not suspended")
    if finding.pod is None and finding.error is not None:
        return value(
            "Unknown",
            "PodStateUnknown",
            "Pod state is unknown. Sandbox suspension cannot be confirmed",
        )
    if finding.pod is None:
        return value("True", "PodTerminated", "Pod has been terminated. Sandbox is suspended")
    if not finding.owned:
        return value(
            "False", "PodNotOwned", "Refused to delete pod because it is not owned by this sandbox"
        )
    return value("False", "PodTerminating", "Pod is terminating. Sandbox is suspending")


def _finished(finding: PodFinding) -> ConditionValue | None:
    if finding.pod is None or not finding.owned:
        return None
    phase = _phase(finding.pod)
    if phase == "Succeeded":
        return ConditionValue(
            CONDITION_FINISHED, "True", "PodSucceeded", "Pod completed successfully"
        )
    if phase == "Failed":
        return ConditionValue(CONDITION_FINISHED, "True", "PodFailed", "Pod failed")
    return None


def _pod_scheduled(finding: PodFinding) -> ConditionValue | None:
    if finding.pod is None and finding.error is not None:
        # A failed pod reconcile does not prove the Pod is gone: unknown, not removed.
        return ConditionValue(
            CONDITION_POD_SCHEDULED,
            "Unknown",
            "PodSchedulingUnknown",
            "Pod state is unknown. Pod scheduling cannot be determined",
        )
    if finding.pod is None or not finding.owned:
        return None
    scheduled = condition_of(finding.pod, "PodScheduled")
    if scheduled is None:
        return ConditionValue(
            CONDITION_POD_SCHEDULED,
            "Unknown",
            "PodSchedulingUnknown",
            "Pod has not reported a PodScheduled condition yet",
        )
    reported = scheduled.get("status")
    status: Status = reported if reported in ("True", "False") else "Unknown"
    reason = str(scheduled.get("reason") or "")
    if not reason:
        reason = "PodScheduled" if status == "True" else "PodSchedulingUnknown"
    return ConditionValue(
        CONDITION_POD_SCHEDULED,
        status,
        reason,
        str(scheduled.get("message") or ""),
    )


def _ready(
    sandbox: Sandbox,
    finding: PodFinding,
    errors: Sequence[str],
    multiple_pods: str | None,
    service: Mapping[str, Any] | None,
) -> ConditionValue:
    def not_ready(reason: str, message: str) -> ConditionValue:
        return ConditionValue(CONDITION_READY, "False", reason, message)

    if multiple_pods is not None:
        # Only the ownership violation: transient errors joined to it would make the message
        # (and so the status) change on every pass.
        return not_ready("MultiplePods", multiple_pods)
    if errors:
        return not_ready("ReconcilerError", "Error seen: " + "\n".join(errors))
    pod = finding.pod
    if sandbox.spec.operating_mode == "Suspended":
        message = "Sandbox is suspending" if pod is not None else "Sandbox is suspended"
        return not_ready("SandboxSuspended", message)
    phase = _phase(pod)
    if pod is not None and phase == "Succeeded":
        return not_ready("PodSucceeded", "Pod completed successfully")
    if pod is not None and phase == "Failed":
        return not_ready("PodFailed", "Pod failed")
    pod_ready = False
    if pod is None:
        message = "Pod does not exist"
    elif phase != "Running":
        message = f"Pod exists with phase: {phase}"
    else:
        message = "Pod is Running but not Ready"
        ready = condition_of(pod, "Ready")
        if ready is not None and ready.get("status") == "True":
            if pod_ips(pod):
                message, pod_ready = "Pod is Ready", True
            else:
                message = "Pod is Ready but has no podIPs yet"
    # A Service is a readiness dependency when asked for, or (service unset) when one exists.
    service_required = (
        sandbox.spec.service if sandbox.spec.service is not None else service is not None
    )
    service_ready = True
    if service_required:
        service_ready = service is not None
        message += "; Service Exists" if service_ready else "; Service does not exist"
    if pod_ready and service_ready:
        return ConditionValue(CONDITION_READY, "True", "DependenciesReady", message)
    return not_ready(REASON_DEPENDENCIES_NOT_READY, message)


def compute_conditions(
    sandbox: Sandbox,
    finding: PodFinding,
    *,
    errors: Sequence[str] = (),
    multiple_pods: str | None = None,
    service: Mapping[str, Any] | None = None,
) -> list[ConditionValue]:
    """The conditions of one pass, in upstream order (``computeConditions``).

    ``errors`` are every error of the pass (PVCs, pod, Service); ``multiple_pods`` the
    MultiplePods error, which wins over them; ``service`` the Service the Sandbox uses.
    """
    conditions = [_suspended(sandbox, finding)]
    finished = _finished(finding)
    if finished is not None:
        conditions.append(finished)
    scheduled = _pod_scheduled(finding)
    if scheduled is not None:
        conditions.append(scheduled)
    conditions.append(_ready(sandbox, finding, errors, multiple_pods, service))
    return conditions


def expired_ready() -> ConditionValue:
    return ConditionValue(CONDITION_READY, "False", "SandboxExpired", "Sandbox has expired")


# --- upserting and writing ------------------------------------------------------------------


def set_conditions(
    conditions: Sequence[Condition] | None,
    values: Sequence[ConditionValue],
    *,
    generation: int | None,
    now: datetime,
    remove: Sequence[str] = (),
) -> list[Condition]:
    """``meta.SetStatusCondition`` for each of ``values``, then ``RemoveStatusCondition`` for
    each type in ``remove``."""
    result = list(conditions or ())
    for value in values:
        for index, existing in enumerate(result):
            if existing.type != value.type:
                continue
            changed = existing.status != value.status
            result[index] = msgspec.structs.replace(
                existing,
                status=value.status,
                reason=value.reason,
                message=value.message,
                observed_generation=generation,
                last_transition_time=rfc3339(now) if changed else existing.last_transition_time,
            )
            break
        else:
            result.append(
                Condition(
                    type=value.type,
                    status=value.status,
                    reason=value.reason,
                    message=value.message,
                    observed_generation=generation,
                    last_transition_time=rfc3339(now),
                )
            )
    return [entry for entry in result if entry.type not in remove]


def with_pod_fields(status: SandboxStatus, finding: PodFinding, name_hash: str) -> SandboxStatus:
    """``selector`` once a Pod is found (never cleared here: the SDK reads the name hash from
    it), and ``podIPs``/``nodeName`` from the Pod only when the Sandbox owns it."""
    pod = finding.pod
    if pod is None:
        return msgspec.structs.replace(status, pod_ips=None, node_name=None)
    selector = f"{LABEL_SANDBOX_NAME_HASH}={name_hash}"
    if not finding.owned:
        return msgspec.structs.replace(status, selector=selector, pod_ips=None, node_name=None)
    spec = pod.get("spec")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    return msgspec.structs.replace(
        status,
        selector=selector,
        pod_ips=pod_ips(pod) or None,
        node_name=str(node) if node else None,
    )


def with_service_fields(
    status: SandboxStatus, service: Mapping[str, Any] | None, cluster_domain: str
) -> SandboxStatus:
    if service is None:
        return msgspec.structs.replace(status, service=None, service_fqdn=None)
    metadata = service.get("metadata") or {}
    name, namespace = str(metadata.get("name")), str(metadata.get("namespace") or "")
    return msgspec.structs.replace(
        status, service=name, service_fqdn=f"{name}.{namespace}.svc.{cluster_domain}"
    )


def _plain(status: SandboxStatus | None) -> dict[str, Any]:
    plain = msgspec.to_builtins(status or SandboxStatus())
    assert isinstance(plain, dict)
    return plain


def status_patch(sandbox: Sandbox, desired: SandboxStatus, key: ObjectKey) -> Patch | None:
    """The status write for ``desired``, or None when it is not worth one."""
    current = sandbox.status or SandboxStatus()
    before, after = _plain(current), _plain(desired)
    if before == after:
        return None
    node_only = before.get("nodeName") != after.get("nodeName") and {
        **after,
        "nodeName": before.get("nodeName"),
    } == {**before, "nodeName": before.get("nodeName")}
    ready = next((c for c in desired.conditions or () if c.type == CONDITION_READY), None)
    if node_only and not (ready is not None and ready.status == "True"):
        return None
    return Patch(
        target=key,
        patch={"status": merge_patch(before, after)},
        subresource="status",
        why="write the status",
    )
