"""The condition matrix of a Sandbox (docs/agent-sandbox.md §2.6)."""

from __future__ import annotations

from typing import Any

import pytest

from services.sandbox.core.plan import read_sandbox
from services.sandbox.core.status import ConditionValue, PodFinding, compute_conditions
from tests.unit.sandbox.samples import owned_pod, pod, sandbox, service


def conditions(
    finding: PodFinding, sb: dict[str, Any] | None = None, **kwargs: Any
) -> dict[str, ConditionValue]:
    values = compute_conditions(read_sandbox(sb or sandbox()), finding, **kwargs)
    return {value.type: value for value in values}


def triple(value: ConditionValue) -> tuple[str, str, str]:
    return value.status, value.reason, value.message


CASES: dict[str, tuple[dict[str, Any], PodFinding, dict[str, Any], dict[str, Any]]] = {
    # name: (sandbox kwargs, finding, compute kwargs, expected {type: triple | None})
    "provisioning, nothing yet": (
        {},
        PodFinding(),
        {},
        {
            "Suspended": ("False", "NotSuspended", "Sandbox is not suspended"),
            "Finished": None,
            "PodScheduled": None,
            "Ready": ("False", "DependenciesNotReady", "Pod does not exist"),
        },
    ),
    "provisioning, Pod ready but the asked-for Service missing": (
        {"service": True},
        PodFinding(owned_pod(), owned=True),
        {},
        {"Ready": ("False", "DependenciesNotReady", "Pod is Ready; Service does not exist")},
    ),
    "Pod Pending": (
        {},
        PodFinding(owned_pod(phase="Pending", ready=None, ips=()), owned=True),
        {},
        {
            "Ready": ("False", "DependenciesNotReady", "Pod exists with phase: Pending"),
            "PodScheduled": (
                "Unknown",
                "PodSchedulingUnknown",
                "Pod has not reported a PodScheduled condition yet",
            ),
        },
    ),
    "Pod Running, not Ready": (
        {},
        PodFinding(owned_pod(ready=False), owned=True),
        {},
        {"Ready": ("False", "DependenciesNotReady", "Pod is Running but not Ready")},
    ),
    "Pod Ready but no IP": (
        {},
        PodFinding(owned_pod(ips=()), owned=True),
        {},
        {"Ready": ("False", "DependenciesNotReady", "Pod is Ready but has no podIPs yet")},
    ),
    "Pod Ready with IP, Service there": (
        {"service": True},
        PodFinding(owned_pod(), owned=True),
        {"service": service(owner={})},
        {
            "Ready": ("True", "DependenciesReady", "Pod is Ready; Service Exists"),
            "PodScheduled": ("True", "PodScheduled", ""),
        },
    ),
    "suspended, owned Pod terminating": (
        {"operatingMode": "Suspended"},
        PodFinding(owned_pod(deleting=True), owned=True),
        {},
        {
            "Suspended": ("False", "PodTerminating", "Pod is terminating. Sandbox is suspending"),
            "Ready": ("False", "SandboxSuspended", "Sandbox is suspending"),
        },
    ),
    "suspended, Pod not owned": (
        {"operatingMode": "Suspended"},
        PodFinding(pod(), owned=False),
        {},
        {
            "Suspended": (
                "False",
                "PodNotOwned",
                "Refused to delete pod because it is not owned by this sandbox",
            ),
            "PodScheduled": None,
        },
    ),
    "suspended, delete failed: still terminating": (
        {"operatingMode": "Suspended"},
        PodFinding(owned_pod(), owned=True),
        {"errors": ["failed to delete pod: boom"]},
        {
            "Suspended": ("False", "PodTerminating", "Pod is terminating. Sandbox is suspending"),
            "Ready": ("False", "ReconcilerError", "Error seen: failed to delete pod: boom"),
        },
    ),
    "fully suspended": (
        {"operatingMode": "Suspended"},
        PodFinding(),
        {},
        {
            "Suspended": ("True", "PodTerminated", "Pod has been terminated. Sandbox is suspended"),
            "Ready": ("False", "SandboxSuspended", "Sandbox is suspended"),
            "PodScheduled": None,
        },
    ),
    "suspended, pod lookup error": (
        {"operatingMode": "Suspended"},
        PodFinding(error="pod get failed"),
        {"errors": ["pod get failed"]},
        {
            "Suspended": (
                "Unknown",
                "PodStateUnknown",
                "Pod state is unknown. Sandbox suspension cannot be confirmed",
            )
        },
    ),
    "running, pod lookup error keeps PodScheduled Unknown": (
        {},
        PodFinding(error="pod get failed"),
        {"errors": ["pod get failed"]},
        {
            "PodScheduled": (
                "Unknown",
                "PodSchedulingUnknown",
                "Pod state is unknown. Pod scheduling cannot be determined",
            ),
            "Suspended": ("False", "NotSuspended", "Sandbox is not suspended"),
        },
    ),
    "resuming, Pod not there yet": (
        {
            "status": {
                "conditions": [
                    {
                        "type": "Suspended",
                        "status": "True",
                        "reason": "PodTerminated",
                        "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ]
            }
        },
        PodFinding(),
        {},
        {
            "Suspended": ("False", "NotSuspended", "Sandbox is not suspended"),
            "Ready": ("False", "DependenciesNotReady", "Pod does not exist"),
        },
    ),
    "pod phase Unknown": (
        {},
        PodFinding(owned_pod(phase="Unknown", ready=None), owned=True),
        {},
        {"Ready": ("False", "DependenciesNotReady", "Pod exists with phase: Unknown")},
    ),
    "Pod Failed": (
        {},
        PodFinding(owned_pod(phase="Failed", ready=False), owned=True),
        {},
        {
            "Finished": ("True", "PodFailed", "Pod failed"),
            "Ready": ("False", "PodFailed", "Pod failed"),
        },
    ),
    "Pod Succeeded": (
        {},
        PodFinding(owned_pod(phase="Succeeded", ready=False), owned=True),
        {},
        {
            "Finished": ("True", "PodSucceeded", "Pod completed successfully"),
            "Ready": ("False", "PodSucceeded", "Pod completed successfully"),
        },
    ),
    "a foreign terminal Pod does not drive Finished": (
        {},
        PodFinding(pod(phase="Failed", ready=False), owned=False),
        {},
        {"Finished": None, "PodScheduled": None},
    ),
    "a reconciler error wins over suspension": (
        {"operatingMode": "Suspended"},
        PodFinding(),
        {"errors": ['PVC "x" is owned by X/y (UID: z), not by sandbox "sb"']},
        {
            "Ready": (
                "False",
                "ReconcilerError",
                'Error seen: PVC "x" is owned by X/y (UID: z), not by sandbox "sb"',
            )
        },
    ),
    "unschedulable: reason and message mirrored": (
        {},
        PodFinding(
            owned_pod(
                phase="Pending",
                ready=None,
                ips=(),
                scheduled={
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 3 Insufficient cpu.",
                },
            ),
            owned=True,
        ),
        {},
        {
            "PodScheduled": (
                "False",
                "Unschedulable",
                "0/3 nodes are available: 3 Insufficient cpu.",
            )
        },
    ),
    "SchedulingGated passes through": (
        {},
        PodFinding(
            owned_pod(
                phase="Pending",
                ready=None,
                ips=(),
                scheduled={"status": "False", "reason": "SchedulingGated", "message": "gated"},
            ),
            owned=True,
        ),
        {},
        {"PodScheduled": ("False", "SchedulingGated", "gated")},
    ),
    "an empty reason falls back": (
        {},
        PodFinding(
            owned_pod(phase="Pending", ready=None, ips=(), scheduled={"status": "False"}),
            owned=True,
        ),
        {},
        {"PodScheduled": ("False", "PodSchedulingUnknown", "")},
    ),
    "MultiplePods: the message leaves out the other errors": (
        {},
        PodFinding(error="multiple Pods (2) are controlled by this Sandbox", multiple=True),
        {
            "errors": ["a transient error"],
            "multiple_pods": "multiple Pods (2) are controlled by this Sandbox",
        },
        {"Ready": ("False", "MultiplePods", "multiple Pods (2) are controlled by this Sandbox")},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_compute_conditions(case: str) -> None:
    """Upstream TestComputeConditions: the condition matrix, row by row."""
    sandbox_kwargs, finding, kwargs, expected = CASES[case]
    found = conditions(finding, sandbox(**sandbox_kwargs), **kwargs)
    for kind, want in expected.items():
        if want is None:
            assert kind not in found, f"{kind} should be absent"
        else:
            assert triple(found[kind]) == want


def test_conditions_come_in_upstream_order() -> None:
    """Suspended, Finished, PodScheduled, Ready: the order of first insertion."""
    values = compute_conditions(
        read_sandbox(sandbox()), PodFinding(owned_pod(phase="Failed", ready=False), owned=True)
    )
    assert [v.type for v in values] == ["Suspended", "Finished", "PodScheduled", "Ready"]


def test_an_existing_service_becomes_a_dependency_when_spec_service_is_unset() -> None:
    """spec.service unset but a Service found: readiness waits for it (§11.3)."""
    found = conditions(PodFinding(owned_pod(), owned=True), service=service(owner={}))
    assert triple(found["Ready"]) == ("True", "DependenciesReady", "Pod is Ready; Service Exists")
    without = conditions(PodFinding(owned_pod(), owned=True), sandbox(service=False))
    assert triple(without["Ready"]) == ("True", "DependenciesReady", "Pod is Ready")
