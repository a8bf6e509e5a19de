"""Realistic event histories for the history tests (unit and component).

Objects are built the way the watcher sees them (kind, metadata with uid and resourceVersion,
spec, status); events with the contract's own constructors, so what the tests feed the history
commands is exactly what the watcher and the workers publish.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from events.codec import encode_event, nats_subject
from events.envelope import ObjectRef
from events.ids import ChangeKind, inputs_digest
from events.types import (
    Decision,
    DecisionAction,
    DecisionMade,
    Event,
    ObjectEvent,
    decision_event,
    observed_event,
)
from services.cli.history.records import LogRecord

T0 = datetime(2026, 5, 4, 10, 3, 1, 2000, tzinfo=UTC)


def at(seconds: float) -> datetime:
    """``T0`` plus ``seconds``."""
    return T0 + timedelta(seconds=seconds)


def sandbox(
    name: str,
    rv: int,
    *,
    uid: str | None = None,
    namespace: str = "default",
    ready: str | None = None,
    reason: str | None = None,
    labels: dict[str, str] | None = None,
    image: str = "python:3.12",
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{name}",
            "resourceVersion": str(rv),
            "creationTimestamp": "2026-05-04T10:00:00Z",
            "labels": dict(labels or {}),
            "managedFields": [{"manager": "sandbus", "operation": "Update"}],
        },
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "main", "image": image}]}}},
    }
    if ready is not None:
        condition: dict[str, Any] = {
            "type": "Ready",
            "status": ready,
            "lastTransitionTime": f"2026-05-04T10:03:{rv:02d}Z",
        }
        if reason:
            condition["reason"] = reason
        obj["status"] = {"conditions": [condition]}
    return obj


def claim(
    name: str, rv: int, *, sandbox_name: str | None = None, ready: str | None = None
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxClaim",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "resourceVersion": str(rv),
        },
        "spec": {"sandboxTemplateRef": {"name": "python"}},
    }
    status: dict[str, Any] = {}
    if sandbox_name:
        status["sandbox"] = {"name": sandbox_name}
    if ready:
        status["conditions"] = [{"type": "Ready", "status": ready}]
    if status:
        obj["status"] = status
    return obj


def change(
    kind: ChangeKind, obj: dict[str, Any], seconds: float, *, synthetic: bool = False
) -> ObjectEvent:
    return observed_event(kind, obj, time=at(seconds), synthetic=synthetic)


def decision(
    worker: str,
    key: ObjectRef,
    seconds: float,
    *,
    outcome: str = "applied",
    reason: str = "",
    actions: Iterable[DecisionAction] = (),
    error: str | None = None,
    requeue_after: float | None = None,
) -> DecisionMade:
    actions = tuple(actions)
    return decision_event(
        Decision(
            worker=worker,
            key=key,
            inputs_digest=inputs_digest([worker, str(key), seconds]),
            outcome=outcome,
            actions=actions,
            reason=reason,
            error=error,
            requeue_after_seconds=requeue_after,
        ),
        time=at(seconds),
    )


def ref(kind: str, name: str, namespace: str = "default") -> ObjectRef:
    return ObjectRef(kind=kind, namespace=namespace, name=name)


def records(events: Iterable[Event]) -> list[LogRecord]:
    """The events as the log would hold them, in the given order (seq from 1)."""
    return [
        LogRecord(
            seq=seq,
            subject=nats_subject(event),
            stored=event.time,
            event=event,
            payload=encode_event(event),
        )
        for seq, event in enumerate(events, start=1)
    ]


def adoption_story() -> list[Event]:
    """The docs/architecture.md story: claim c1 takes warm sandbox p-7xk2f from queue
    default/python.

    Times (seconds after T0): 0 the warm sandbox exists and is ready; 10 claim c1 created;
    10.005 the claim worker adopts p-7xk2f; 10.017 the sandbox is relabelled (adopted);
    10.020 the claim points at it; 10.029 the claim is Ready; 20 the sandbox worker reconciles
    an unrelated sandbox (noise); 30 the claim is deleted.
    """
    warm = sandbox("p-7xk2f", 5, ready="True", labels={"pool": "python"})
    adopted = sandbox("p-7xk2f", 9, ready="True", labels={"claim": "c1"})
    return [
        change("added", warm, 0),
        change("added", claim("c1", 7), 10),
        decision(
            "claim",
            ref("SandboxClaim", "c1"),
            10.005,
            reason="a warm sandbox was available",
            actions=[
                DecisionAction(
                    verb="dequeue",
                    target=ref("Sandbox", "p-7xk2f"),
                    detail="from queue default/python (depth 12→11)",
                ),
                DecisionAction(verb="patch", target=ref("Sandbox", "p-7xk2f"), detail="adopted"),
            ],
        ),
        change("modified", adopted, 10.017),
        change("modified", claim("c1", 8, sandbox_name="p-7xk2f"), 10.020),
        change("modified", claim("c1", 10, sandbox_name="p-7xk2f", ready="True"), 10.029),
        decision("sandbox", ref("Sandbox", "other"), 20, outcome="noop"),
        change("deleted", claim("c1", 11, sandbox_name="p-7xk2f", ready="True"), 30),
    ]
