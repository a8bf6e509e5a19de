"""What a SandboxTemplate says when its NetworkPolicy cannot be written, and how its claims
read it (issue #32, docs/conditions.md §6, §7).

A SandboxTemplate has no status (upstream's neither), and the sandbox worker that writes its
NetworkPolicy ``<template>-network-policy`` is not the claim worker whose claims run sandboxes
under it. So the template's reconciler says why the policy is not there on the template itself,
in the annotation :data:`ANNOTATION_NETWORK_POLICY_FAILURE` (the API server's words for a write
it refuses, or that keeps failing, or a policy of that name that is someone else's), removed
once the policy is written; and each claim of a pool made from that template reads it and
reports it on the claim, where its user looks: the condition ``NetworkPolicyFailure``, reason
``NetworkPolicyNotApplied``, and a Warning Event of that reason when it appears.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from api.objects import annotations_of

__all__ = [
    "ANNOTATION_NETWORK_POLICY_FAILURE",
    "CONDITION_NETWORK_POLICY_FAILURE",
    "REASON_NETWORK_POLICY_NOT_APPLIED",
    "network_policy_failure",
]

ANNOTATION_NETWORK_POLICY_FAILURE: Final = "sandbus.io/network-policy-failure"
"""On a SandboxTemplate: why its NetworkPolicy is not written (absent: nothing is wrong)."""
CONDITION_NETWORK_POLICY_FAILURE: Final = "NetworkPolicyFailure"
"""The claim's condition while its template's NetworkPolicy is not written (sandbus's)."""
REASON_NETWORK_POLICY_NOT_APPLIED: Final = "NetworkPolicyNotApplied"
"""Its reason, and the reason of the Warning Event that announces it."""


def network_policy_failure(template: Mapping[str, Any] | None) -> str | None:
    """Why the template's NetworkPolicy is not written, as its reconciler said (None: it is,
    or nothing is known to be wrong)."""
    if template is None:
        return None
    said = annotations_of(template).get(ANNOTATION_NETWORK_POLICY_FAILURE)
    return str(said) if said else None
