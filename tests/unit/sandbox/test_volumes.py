"""A Sandbox's PVCs (docs/agent-sandbox.md §2.3, §2.5)."""

from __future__ import annotations

from typing import Any

import pytest

from api.keys import LABEL_ADOPTABLE, LABEL_SANDBOX_NAME_HASH, name_hash
from events.envelope import ObjectKey
from services.runtime.reconcile.actions import Create, Patch
from services.sandbox.core.plan import read_sandbox
from services.sandbox.core.volumes import ClaimsPlan, plan_claims
from tests.unit.sandbox.samples import FakeCluster, owner_ref, pvc, sandbox

HASH = name_hash("sb")
TEMPLATE = {
    "metadata": {"name": "data", "labels": {"tier": "disk"}, "annotations": {"note": "n"}},
    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
}


def plan(existing: dict[str, dict[str, Any]] | None = None) -> ClaimsPlan:
    return plan_claims(read_sandbox(sandbox(volumeClaimTemplates=[TEMPLATE])), existing or {}, HASH)


def test_creates_the_pvc() -> None:
    """Upstream TestReconcilePVCs "creates PVC": ``<template>-<sandbox>``, template labels plus
    the name-hash label, template annotations and spec, controlled by the Sandbox."""
    result = plan()
    assert result.error is None and len(result.actions) == 1
    action = result.actions[0]
    assert isinstance(action, Create)
    assert action.body["metadata"] == {
        "name": "data-sb",
        "namespace": "default",
        "labels": {"tier": "disk", LABEL_SANDBOX_NAME_HASH: HASH},
        "annotations": {"note": "n"},
        "ownerReferences": [owner_ref()],
    }
    assert action.body["spec"] == TEMPLATE["spec"]


def test_uses_an_owned_pvc() -> None:
    """Upstream TestReconcilePVCs "uses owned"."""
    assert plan({"data-sb": pvc("data-sb", owner=owner_ref())}) == ClaimsPlan()


def test_refuses_a_pvc_owned_by_another_controller() -> None:
    """Upstream TestReconcilePVCs "refuses other-owned"."""
    result = plan(
        {"data-sb": pvc("data-sb", owner=owner_ref(uid="u2", name="x", kind="StatefulSet"))}
    )
    assert result.actions == ()
    assert result.error == 'PVC "data-sb" is owned by StatefulSet/x (UID: u2), not by sandbox "sb"'


@pytest.mark.parametrize(
    "labels",
    [{LABEL_ADOPTABLE: "true"}, {LABEL_SANDBOX_NAME_HASH: HASH}],
    ids=["adoptable", "legacy"],
)
def test_adopts_an_unowned_pvc(labels: dict[str, str]) -> None:
    """Upstream TestReconcilePVCs "adopts unowned (adoptable or legacy tracking label)": a merge
    patch adding the Sandbox as controller, conditional on the version it was read at (another
    adopter may write first: then 409, and the next pass decides again)."""
    result = plan({"data-sb": pvc("data-sb", labels=labels)})
    assert result.actions == (
        Patch(
            ObjectKey("PersistentVolumeClaim", "default", "data-sb"),
            {"metadata": {"ownerReferences": [owner_ref()], "resourceVersion": "40"}},
            why="adopt the PVC",
            on_conflict="refresh",
        ),
    )


def test_refuses_an_unowned_pvc_without_the_label() -> None:
    """Upstream TestReconcilePVCs "refuses unowned without label"."""
    result = plan({"data-sb": pvc("data-sb")})
    assert result.actions == ()
    assert result.error is not None and result.error.startswith(
        'cannot adopt unowned PVC "data-sb"'
    )


def test_the_pod_mounts_the_claims_and_the_pvc_outlives_suspension() -> None:
    """§2.3 and §2.7: the Pod's volume of the template's name points at the PVC; suspending
    deletes the Pod but never the PVC."""
    sb = sandbox(volumeClaimTemplates=[TEMPLATE])
    sb["spec"]["podTemplate"]["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    cluster = FakeCluster().add(sb)
    cluster.converge()
    volumes = cluster.get("Pod", "sb")["spec"]["volumes"]  # type: ignore[index]
    assert volumes == [{"name": "data", "persistentVolumeClaim": {"claimName": "data-sb"}}]
    cluster.objects[ObjectKey("Sandbox", "default", "sb")]["spec"]["operatingMode"] = "Suspended"
    cluster.converge()
    assert cluster.get("Pod", "sb") is None
    assert cluster.get("PersistentVolumeClaim", "data-sb") is not None
