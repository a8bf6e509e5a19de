"""The SandboxClaim's status (docs/agent-sandbox.md §3.7): what the claim reports about its
Sandbox, and the one reason a person reads when it is not Ready.

``Ready`` is the Sandbox's own Ready condition copied verbatim (reason, message,
lastTransitionTime), with only ``observedGeneration`` made the claim's: the SDK waits for
``status.sandbox.name`` and Ready=True in the same watch event, and a dashboard shows the
Sandbox's reason. Without a Sandbox, or with an error, Ready is False with one of
:data:`REASONS`. ``Finished`` is mirrored from the Sandbox and kept once the Sandbox is gone
(expiry counts from it). ``status.sandbox`` names the Sandbox and its pod IPs; it is cleared
only when there is no Sandbox and no error, so a transient failure never wipes the binding.
``NetworkPolicyFailure`` (sandbus's) is there, True, only while the template's NetworkPolicy
is not written (:mod:`services.domain.agentsandbox.policy_failure`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from api.objects import Json, condition_of, metadata_of
from events.envelope import ObjectKey
from services.domain.agentsandbox.policy_failure import (
    CONDITION_NETWORK_POLICY_FAILURE,
    REASON_NETWORK_POLICY_NOT_APPLIED,
)
from services.runtime.reconcile.actions import Patch

__all__ = [
    "ClaimProblem",
    "claim_status",
    "ready_reason",
    "rfc3339",
    "status_patch",
]

_EXPIRED_INDEPENDENTLY: Final = (
    "Underlying Sandbox resource has expired independently of the Claim."
)


@dataclass(frozen=True)
class ClaimProblem:
    """Why the claim is not Ready, when the claim controller knows better than the Sandbox."""

    reason: str
    message: str
    keeps_binding: bool = True
    """A transient problem keeps ``status.sandbox``; an expired claim's ``ClaimExpired``
    clears it."""


def rfc3339(moment: datetime) -> str:
    """A ``metav1.Time``: UTC, whole seconds."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _set(
    existing: Mapping[str, Any] | None,
    kind: str,
    status: str,
    reason: str,
    message: str,
    generation: int | None,
    now: datetime,
) -> Json:
    # meta.SetStatusCondition: the transition time moves only when the status does.
    changed = existing is None or existing.get("status") != status
    condition: Json = {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": rfc3339(now)
        if changed or existing is None
        else existing.get("lastTransitionTime") or rfc3339(now),
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return condition


def _pod_ips(sandbox: Mapping[str, Any]) -> list[str]:
    return [str(ip) for ip in (sandbox.get("status") or {}).get("podIPs") or () if ip]


def claim_status(
    claim: Mapping[str, Any],
    sandbox: Mapping[str, Any] | None,
    problem: ClaimProblem | None,
    now: datetime,
    *,
    policy_failure: str | None = None,
) -> Json:
    """The status the claim should have, given its Sandbox (None: none), its problem, and why
    its template's NetworkPolicy is not written (None: nothing is wrong with it)."""
    current = claim.get("status") or {}
    generation = metadata_of(claim).get("generation")
    generation = int(generation) if isinstance(generation, int) else None
    ready_before = condition_of(claim, "Ready")
    conditions: list[Json] = []
    sandbox_ready = condition_of(sandbox, "Ready") if sandbox is not None else None
    if problem is not None:
        conditions.append(
            _set(ready_before, "Ready", "False", problem.reason, problem.message, generation, now)
        )
    elif sandbox is None:
        conditions.append(
            _set(
                ready_before,
                "Ready",
                "False",
                "SandboxMissing",
                "Sandbox does not exist",
                generation,
                now,
            )
        )
    elif sandbox_ready is None:
        conditions.append(
            _set(
                ready_before,
                "Ready",
                "False",
                "SandboxNotReady",
                "Sandbox is not ready",
                generation,
                now,
            )
        )
    elif sandbox_ready.get("reason") == "SandboxExpired":
        conditions.append(
            _set(
                ready_before,
                "Ready",
                "False",
                "SandboxExpired",
                _EXPIRED_INDEPENDENTLY,
                generation,
                now,
            )
        )
    else:
        forwarded = {k: v for k, v in sandbox_ready.items() if k != "observedGeneration"}
        if generation is not None:
            forwarded["observedGeneration"] = generation
        conditions.append(forwarded)
    finished = condition_of(sandbox, "Finished") if sandbox is not None else None
    if finished is None and sandbox is None:
        finished = condition_of(claim, "Finished")  # kept once the Sandbox is gone
    if finished is not None:
        conditions.append(dict(finished))
    if policy_failure is not None:
        before = condition_of(claim, CONDITION_NETWORK_POLICY_FAILURE)
        conditions.append(
            _set(
                before,
                CONDITION_NETWORK_POLICY_FAILURE,
                "True",
                REASON_NETWORK_POLICY_NOT_APPLIED,
                policy_failure,
                generation,
                now,
            )
        )
    ours = ("Ready", "Finished", CONDITION_NETWORK_POLICY_FAILURE)
    others = [
        dict(entry)
        for entry in current.get("conditions") or ()
        if isinstance(entry, Mapping) and entry.get("type") not in ours
    ]
    status: Json = {"conditions": sorted([*conditions, *others], key=lambda c: str(c["type"]))}
    if sandbox is not None:
        binding: Json = {"name": str(metadata_of(sandbox).get("name") or "")}
        ips = _pod_ips(sandbox)
        if ips:
            binding["podIPs"] = ips
        status["sandbox"] = binding
    elif problem is not None and problem.keeps_binding and current.get("sandbox"):
        status["sandbox"] = current["sandbox"]
    return status


def _comparable(status: Mapping[str, Any]) -> Json:
    conditions = sorted(
        (dict(c) for c in status.get("conditions") or () if isinstance(c, Mapping)),
        key=lambda c: str(c.get("type")),
    )
    binding = status.get("sandbox") or None
    return {"conditions": conditions, "sandbox": binding}


def status_patch(
    key: ObjectKey, claim: Mapping[str, Any], desired: Json, *, why: str, step: str = ""
) -> Patch | None:
    """The status write that makes the claim report ``desired``; None when it already does.

    Conditional on the claim's version (upstream's optimistic lock on the claim status), taken
    when the patch runs, so it follows an earlier write of the same plan to the claim."""
    current = claim.get("status") or {}
    if _comparable(current) == _comparable(desired):
        return None
    patch: Json = {"status": {"conditions": desired["conditions"]}}
    binding = desired.get("sandbox")
    # None removes it. A merge patch merges the binding into the stored one, so pod IPs the
    # Sandbox no longer has (or the previous Sandbox had) must be removed explicitly.
    patch["status"]["sandbox"] = (
        None if binding is None else {"name": binding["name"], "podIPs": binding.get("podIPs")}
    )
    return Patch(
        key,
        patch,
        subresource="status",
        why=why,
        on_conflict="refresh",
        conditional=True,
        step=step,
    )


def ready_reason(claim: Mapping[str, Any]) -> str:
    condition = condition_of(claim, "Ready")
    return str(condition.get("reason") or "") if condition is not None else ""
