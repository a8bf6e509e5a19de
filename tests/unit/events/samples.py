"""Sample events shared by the event-contract tests (unit and component)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from events.envelope import ObjectRef
from events.types import (
    Decision,
    DecisionAction,
    DecisionMade,
    Outcome,
    WarmEntry,
    WarmQueued,
    decision_event,
    warm_queued_event,
)

NOW = datetime(2026, 5, 4, 10, 3, 1, 2000, tzinfo=UTC)
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def sandbox(name: str = "my.app", resource_version: str = "42") -> dict[str, Any]:
    return {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": "0b8c5a9e-1111-4c2e-9d6f-2a7d3c1e5f00",
            "resourceVersion": resource_version,
            "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
        },
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "python"}]}}},
    }


def a_decision() -> DecisionMade:
    key = ObjectRef(kind="SandboxClaim", namespace="default", name="claim.1")
    return decision_event(
        Decision(
            worker="claim",
            key=key,
            inputs_digest="sha256:" + "ab" * 32,
            outcome=Outcome.APPLIED,
            triggers=("u:7:added",),
            actions=(
                DecisionAction(
                    verb="patch",
                    target=ObjectRef(kind="Sandbox", namespace="default", name="p-7xk2f"),
                    detail="adopted from queue default/python",
                ),
            ),
            reason="a warm sandbox was available",
        ),
        time=NOW,
        traceparent=TRACEPARENT,
    )


def a_warm_entry() -> WarmQueued:
    return warm_queued_event(
        "Sandbox",
        "default",
        "p-7xk2f",
        WarmEntry(
            uid="u-9", resource_version="88", template_hash="abc123", pool="python", node="n-1"
        ),
        time=NOW,
        source="/sandbus/pool",
    )
