"""``agent_sandboxes`` (services/sandbox/core/census.py): the Sandboxes counted by agent-sandbox's
labels, so its dashboards keep working."""

from __future__ import annotations

from typing import Any

from services.sandbox.core.census import SANDBOX_LABELS, count_sandboxes


def sandbox(
    name: str,
    *,
    ready: str | None = "True",
    reason: str = "DependenciesReady",
    launch: str | None = "warm",
    owner: str | None = "SandboxClaim",
    template: str | None = "python",
    created_by: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "team-a", "labels": {}, "annotations": {}}
    if launch:
        meta["labels"]["agents.x-k8s.io/launch-type"] = launch
    if created_by:
        meta["labels"]["agents.x-k8s.io/created-by"] = created_by
    if template:
        meta["annotations"]["agents.x-k8s.io/sandbox-template-ref"] = template
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x", "uid": "u", "controller": True}]
    status: dict[str, Any] = {}
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": ready, "reason": reason}]
    return {"metadata": meta, "status": status}


def test_sandboxes_are_counted_by_upstreams_labels() -> None:
    counts = count_sandboxes(
        [
            sandbox("a"),
            sandbox("b"),
            sandbox("c", ready="False", reason="SandboxExpired", launch="cold"),
            sandbox("d", ready=None, launch=None, owner=None, template=None),
            sandbox("e", owner="SandboxWarmPool", created_by="someone-unknown"),
        ]
    )
    assert SANDBOX_LABELS[:3] == ("namespace", "ready_condition", "expired")
    assert counts == {
        ("team-a", "true", "false", "warm", "python", "SandboxClaim", ""): 2.0,
        ("team-a", "false", "true", "cold", "python", "SandboxClaim", ""): 1.0,
        ("team-a", "false", "false", "unknown", "unknown", "None", ""): 1.0,
        ("team-a", "true", "false", "warm", "python", "SandboxWarmPool", "unknown"): 1.0,
    }


def test_no_sandboxes_no_series() -> None:
    assert count_sandboxes([]) == {}
