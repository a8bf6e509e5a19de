"""Whole reconciles of a Sandbox, run to convergence against a tiny in-memory API server
(docs/agent-sandbox.md §2.2, §2.6, §2.7)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from api.keys import ANNOTATION_POD_NAME, LABEL_ADOPTABLE, LABEL_SANDBOX_NAME_HASH, name_hash
from events.envelope import ObjectKey
from services.runtime.reconcile.actions import Create, Delete, Patch
from services.sandbox.core.lifecycle import EXPIRED_REQUEUE, check_expiry
from services.sandbox.core.plan import plan_sandbox, read_sandbox
from services.sandbox.core.status import PodFinding, compute_conditions
from tests.support.plans import actions_of
from tests.support.samples import conditions_by_type, stamp
from tests.unit.sandbox.samples import (
    NOW,
    FakeCluster,
    observation,
    owned_pod,
    owner_ref,
    pod,
    pvc,
    sandbox,
    service,
    status_written,
)

HASH = name_hash("sb")
SB = ObjectKey("Sandbox", "default", "sb")


def ready(obj: dict[str, Any]) -> tuple[str, str, str]:
    c = conditions_by_type(obj)["Ready"]
    return c["status"], c["reason"], c["message"]


def sandbox_of(cluster: FakeCluster) -> dict[str, Any]:
    found = cluster.get("Sandbox", "sb")
    assert found is not None
    return found


# --- TestReconcile ----------------------------------------------------------------------------


def test_minimal_spec_gives_a_pod_and_no_service() -> None:
    """Upstream TestReconcile "minimal spec → Pod but no Service"."""
    cluster = FakeCluster().add(sandbox())
    plans = cluster.converge()
    assert cluster.get("Pod", "sb") is not None
    assert cluster.get("Service", "sb") is None
    sb = sandbox_of(cluster)
    assert "annotations" not in sb["metadata"], "the Pod is the one its name resolves to"
    assert ready(sb) == ("False", "DependenciesNotReady", "Pod exists with phase: Pending")
    assert sb["status"]["selector"] == f"{LABEL_SANDBOX_NAME_HASH}={HASH}"
    assert len(plans) == 2, "children first, then the status from what the server returned"
    assert plan_sandbox(cluster.observe(), NOW).actions == (), "converged: nothing more to write"


def test_pod_and_service() -> None:
    """Upstream TestReconcile "Pod + Service"."""
    cluster = FakeCluster().add(sandbox(service=True))
    cluster.converge()
    assert cluster.get("Pod", "sb") is not None
    svc = cluster.get("Service", "sb")
    assert svc is not None and svc["spec"]["clusterIP"] == "None"
    sb = sandbox_of(cluster)
    assert sb["status"]["serviceFQDN"] == "sb.default.svc.cluster.local"
    assert ready(sb)[2] == "Pod exists with phase: Pending; Service Exists"


def test_pvc_pod_and_service() -> None:
    """Upstream TestReconcile "PVC+Pod+Service"."""
    template = {"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}
    cluster = FakeCluster().add(sandbox(service=True, volumeClaimTemplates=[template]))
    cluster.converge()
    for kind, name in (("PersistentVolumeClaim", "data-sb"), ("Pod", "sb"), ("Service", "sb")):
        assert cluster.get(kind, name) is not None, kind


def test_an_existing_pod_propagates_its_ips() -> None:
    """Upstream TestReconcile "existing pod propagates PodIPs" and "ready pod → Ready without
    Service": podIPs and nodeName copied from the owned Pod; Ready=True/DependenciesReady."""
    cluster = FakeCluster().add(sandbox(), owned_pod(ips=("10.244.0.9", "fd00::9")))
    cluster.converge()
    status = sandbox_of(cluster)["status"]
    assert status["podIPs"] == ["10.244.0.9", "fd00::9"]
    assert status["nodeName"] == "node-1"
    assert ready(sandbox_of(cluster)) == ("True", "DependenciesReady", "Pod is Ready")


def test_a_legacy_tracking_label_pod_is_adopted() -> None:
    """Upstream TestReconcile "legacy tracking-label pod adopted"."""
    cluster = FakeCluster().add(sandbox(), pod(owner=None))
    cluster.converge()
    adopted = cluster.get("Pod", "sb")
    assert adopted is not None and adopted["metadata"]["ownerReferences"] == [owner_ref()]
    assert ready(sandbox_of(cluster))[0] == "True"


def expire(cluster: FakeCluster, policy: str = "Retain") -> None:
    spec = cluster.objects[SB]["spec"]
    spec["shutdownTime"] = stamp(NOW - timedelta(seconds=1))
    spec["shutdownPolicy"] = policy


def test_expired_retain_takes_two_passes() -> None:
    """Upstream TestReconcile "expired Retain (2 passes)": the first pass only marks Ready=False/
    SandboxExpired and asks to come back in 1 ms; the next deletes the Pod and Service (PVCs
    stay) and leaves a status of conditions only."""
    cluster = FakeCluster().add(sandbox(service=True), owned_pod(), service(owner=owner_ref()))
    cluster.converge()
    assert sandbox_of(cluster)["status"].get("podIPs")
    expire(cluster)
    first = plan_sandbox(cluster.observe(), NOW)
    assert first.requeue_after == EXPIRED_REQUEUE
    assert [type(a) for a in first.actions] == [Patch, Create]
    (event,) = actions_of(first, Create)
    assert event.body["reason"] == "SandboxExpired"
    cluster.apply(first)
    assert ready(sandbox_of(cluster)) == ("False", "SandboxExpired", "Sandbox has expired")
    assert cluster.get("Pod", "sb") is not None, "nothing torn down in the first pass"
    assert "PodScheduled" not in conditions_by_type(sandbox_of(cluster))

    cluster.converge()
    assert cluster.get("Pod", "sb") is None and cluster.get("Service", "sb") is None
    sb = sandbox_of(cluster)
    assert set(sb["status"]) == {"conditions"}
    assert ready(sb) == ("False", "SandboxExpired", "Sandbox has expired")


def test_expired_retain_deletes_an_adopted_warm_pod() -> None:
    """Upstream TestReconcile "expired Retain deletes adopted warm pod": the Pod tracked by the
    annotation is deleted when the Sandbox owns it."""
    sb = sandbox(annotations={ANNOTATION_POD_NAME: "warm-1"})
    cluster = FakeCluster().add(sb, owned_pod("warm-1"))
    expire(cluster)
    cluster.converge()
    cluster.converge()
    assert cluster.get("Pod", "warm-1") is None


def test_expired_delete_deletes_the_sandbox() -> None:
    """Upstream TestReconcile "expired Delete deletes Sandbox"."""
    cluster = FakeCluster().add(sandbox(), owned_pod())
    expire(cluster, "Delete")
    cluster.converge()
    plans = cluster.converge()
    assert cluster.get("Sandbox", "sb") is None
    deletes = [a.target for a in actions_of(plans[-1]) if isinstance(a, Delete)]
    assert deletes[-1] == SB


@pytest.mark.parametrize(
    "foreign",
    [
        pod(owner=owner_ref(uid="x", name="rs", kind="ReplicaSet")),
        pod(labels={LABEL_ADOPTABLE: "true"}),
    ],
    ids=["owned by another", "unowned"],
)
def test_expiry_skips_a_pod_it_does_not_own(foreign: dict[str, Any]) -> None:
    """Upstream TestReconcile "expired skips pod owned by other / unowned pod"."""
    cluster = FakeCluster().add(sandbox(), foreign)
    expire(cluster)
    cluster.converge()
    cluster.converge()
    assert cluster.get("Pod", "sb") is not None
    assert ready(sandbox_of(cluster))[1] == "SandboxExpired"


def test_expiry_with_no_pod_or_service() -> None:
    """Upstream TestReconcile "expired with no pod/service"."""
    cluster = FakeCluster().add(sandbox())
    expire(cluster)
    cluster.converge()
    plans = cluster.converge()
    assert not [a for p in plans for a in actions_of(p) if isinstance(a, Delete)]
    assert ready(sandbox_of(cluster))[1] == "SandboxExpired"


def test_suspending_with_a_terminating_pod() -> None:
    """Upstream TestReconcile "suspend with terminating pod → Suspended=False/PodTerminating"."""
    cluster = FakeCluster(graceful_pods=True).add(sandbox(operatingMode="Suspended"), owned_pod())
    cluster.converge()
    suspended = conditions_by_type(sandbox_of(cluster))["Suspended"]
    assert (suspended["status"], suspended["reason"]) == ("False", "PodTerminating")
    assert ready(sandbox_of(cluster)) == ("False", "SandboxSuspended", "Sandbox is suspending")


def test_suspending_with_no_pod() -> None:
    """Upstream TestReconcile "suspend with no pod → True/PodTerminated"."""
    cluster = FakeCluster().add(sandbox(operatingMode="Suspended"))
    cluster.converge()
    suspended = conditions_by_type(sandbox_of(cluster))["Suspended"]
    assert (suspended["status"], suspended["reason"]) == ("True", "PodTerminated")


def test_suspend_then_resume_gives_a_new_pod() -> None:
    """§2.7: suspend deletes the Pod and keeps the Sandbox; resume creates a new Pod."""
    cluster = FakeCluster().add(sandbox(), owned_pod(uid="first"))
    cluster.converge()
    cluster.objects[SB]["spec"]["operatingMode"] = "Suspended"
    cluster.converge()
    assert cluster.get("Pod", "sb") is None
    cluster.objects[SB]["spec"]["operatingMode"] = "Running"
    cluster.converge()
    resumed = cluster.get("Pod", "sb")
    assert resumed is not None and resumed["metadata"]["uid"] != "first"


def test_a_failed_pod_is_not_replaced() -> None:
    """§2.7 and §11.11: a failed Pod gives Ready=False/PodFailed and Finished=True, and is
    neither deleted nor recreated."""
    cluster = FakeCluster().add(sandbox(), owned_pod(phase="Failed", ready=False))
    cluster.converge()
    sb = sandbox_of(cluster)
    assert ready(sb) == ("False", "PodFailed", "Pod failed")
    assert conditions_by_type(sb)["Finished"]["reason"] == "PodFailed"
    assert not [
        w for w in cluster.writes if getattr(w, "target", None) == ObjectKey("Pod", "default", "sb")
    ]


# --- the standalone reconcile tests ------------------------------------------------------------


@pytest.mark.parametrize(
    ("shutdown", "expected"),
    [
        (None, (False, None)),
        (timedelta(hours=1), (False, 3600.0)),
        (timedelta(0), (True, None)),
        (timedelta(milliseconds=300), (False, 2.0)),
        (-timedelta(minutes=1), (True, None)),
    ],
    ids=["no shutdownTime", "future", "now is expired", "shortly: 2 s floor", "past"],
)
def test_sandbox_expiry(shutdown: timedelta | None, expected: tuple[bool, float | None]) -> None:
    """Upstream TestSandboxExpiry."""
    spec: dict[str, Any] = {} if shutdown is None else {"shutdownTime": stamp(NOW + shutdown)}
    if shutdown == timedelta(milliseconds=300):
        spec = {"shutdownTime": (NOW + shutdown).isoformat()}
    assert check_expiry(read_sandbox(sandbox(**spec)), NOW) == expected


def test_a_future_shutdown_time_is_when_the_sandbox_comes_back() -> None:
    """§2.2 step 4: RequeueAfter = max(shutdownTime - now, 2 s)."""
    obs = observation(
        sandbox(
            shutdownTime=stamp(NOW + timedelta(minutes=10)), annotations={ANNOTATION_POD_NAME: "sb"}
        ),
        pods=(owned_pod(),),
    )
    assert plan_sandbox(obs, NOW).requeue_after == 600.0


@pytest.mark.parametrize("policy", ["Retain", "Delete"])
def test_past_shutdown_time_by_policy(policy: str) -> None:
    """Upstream TestSandboxExpiry "past Retain" / "past Delete"."""
    cluster = FakeCluster().add(sandbox(), owned_pod())
    expire(cluster, policy)
    cluster.converge()
    cluster.converge()
    assert (cluster.get("Sandbox", "sb") is None) == (policy == "Delete")


def test_a_suspended_sandbox_does_not_leak_a_foreign_pods_ip_or_node() -> None:
    """Upstream TestReconcileChildResourcesSuspendedForeignPodDoesNotLeakIPOrNodeName."""
    foreign = pod(owner=owner_ref(uid="x", name="rs", kind="ReplicaSet"))
    obs = observation(
        sandbox(operatingMode="Suspended", status={"podIPs": ["1.2.3.4"], "nodeName": "n"}),
        pods=(foreign,),
    )
    written = status_written(plan_sandbox(obs, NOW))
    assert written is not None
    assert written["podIPs"] is None and written["nodeName"] is None
    suspended = next(c for c in written["conditions"] if c["type"] == "Suspended")
    assert suspended["reason"] == "PodNotOwned"


def test_pod_scheduled_is_removed_with_the_pod() -> None:
    """Upstream TestPodScheduledConditionRemovedWithPod."""
    cluster = FakeCluster().add(sandbox(), owned_pod())
    cluster.converge()
    assert conditions_by_type(sandbox_of(cluster))["PodScheduled"]["status"] == "True"
    cluster.converge()
    cluster.objects[SB]["spec"]["operatingMode"] = "Suspended"
    cluster.converge()
    assert "PodScheduled" not in conditions_by_type(sandbox_of(cluster))


def test_pod_scheduled_is_unknown_when_the_pod_cannot_be_determined() -> None:
    """Upstream TestPodScheduledConditionUnknownWhenPodLookupFails: a pod reconcile that failed
    (here: a Pod the Sandbox may not adopt) does not prove the Pod gone; PodScheduled turns
    Unknown instead of disappearing."""
    previous = {
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "True",
                "reason": "PodScheduled",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ]
    }
    obs = observation(sandbox(status=previous), pods=(pod(labels={}, hashed_for=None),))
    plan = plan_sandbox(obs, NOW)
    written = status_written(plan)
    assert written is not None
    scheduled = next(c for c in written["conditions"] if c["type"] == "PodScheduled")
    assert (scheduled["status"], scheduled["reason"]) == ("Unknown", "PodSchedulingUnknown")
    assert plan.error is not None, "retried with backoff, as an error returned upstream"


def test_suspended_is_unknown_only_for_a_pod_error() -> None:
    """Upstream TestSuspendedConditionUnknownWhenPodLookupFails: a pod error makes Suspended
    Unknown; a Service error alone does not."""
    sb = read_sandbox(sandbox(operatingMode="Suspended"))
    pod_error = compute_conditions(
        sb, PodFinding(error="pod get failed"), errors=["pod get failed"]
    )
    assert pod_error[0].status == "Unknown"
    service_error = compute_conditions(sb, PodFinding(), errors=["service get failed"])
    assert (service_error[0].status, service_error[0].reason) == ("True", "PodTerminated")


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_expiry_is_two_pass_and_keeps_finished(phase: str) -> None:
    """Upstream TestSandboxShutdownExpiryUsesTwoPassAndPreservesFinishedCondition."""
    cluster = FakeCluster().add(sandbox(), owned_pod(phase=phase, ready=False))
    cluster.converge()
    finished = conditions_by_type(sandbox_of(cluster))["Finished"]
    expire(cluster)
    cluster.converge()
    assert cluster.get("Pod", "sb") is not None, "first pass: only marked"
    cluster.converge()
    sb = sandbox_of(cluster)
    assert cluster.get("Pod", "sb") is None
    assert conditions_by_type(sb)["Finished"] == finished
    assert ready(sb)[1] == "SandboxExpired"


def test_conditions_do_not_accumulate() -> None:
    """Upstream TestSandboxReconcile_ConditionsDoNotAccumulate: repeated reconciles upsert."""
    cluster = FakeCluster().add(sandbox(), owned_pod(ready=False))
    for _ in range(3):
        cluster.converge()
    cluster.objects[ObjectKey("Pod", "default", "sb")]["status"]["conditions"][-1]["status"] = (
        "True"
    )
    for _ in range(3):
        cluster.converge()
    types = [c["type"] for c in sandbox_of(cluster)["status"]["conditions"]]
    assert sorted(types) == sorted(set(types)) == ["PodScheduled", "Ready", "Suspended"]


def test_a_condition_keeps_its_transition_time_until_its_status_changes() -> None:
    """§2.6: upsert like meta.SetStatusCondition; lastTransitionTime moves only on a change of
    status, while reason and message follow the latest pass."""
    cluster = FakeCluster().add(sandbox(), owned_pod(ready=False))
    cluster.converge(now=NOW)
    first = conditions_by_type(sandbox_of(cluster))["Ready"]
    cluster.objects[ObjectKey("Pod", "default", "sb")]["status"]["phase"] = "Pending"
    cluster.converge(now=NOW + timedelta(minutes=1))
    second = conditions_by_type(sandbox_of(cluster))["Ready"]
    assert second["message"] != first["message"]
    assert second["lastTransitionTime"] == first["lastTransitionTime"]
    cluster.objects[ObjectKey("Pod", "default", "sb")]["status"] = owned_pod()["status"]
    cluster.converge(now=NOW + timedelta(minutes=2))
    third = conditions_by_type(sandbox_of(cluster))["Ready"]
    assert third["lastTransitionTime"] == stamp(NOW + timedelta(minutes=2))


def test_a_node_name_alone_is_not_written_before_ready() -> None:
    """Upstream TestReconcileCoalescesNodeNameStatusWrite: a status change of nodeName only is
    not written while the Sandbox is not Ready; it rides along with the next write."""
    cluster = FakeCluster().add(
        sandbox(), owned_pod(phase="Pending", ready=None, ips=(), node=None)
    )
    cluster.converge()
    assert "nodeName" not in sandbox_of(cluster)["status"]
    cluster.objects[ObjectKey("Pod", "default", "sb")]["spec"]["nodeName"] = "node-3"
    assert plan_sandbox(cluster.observe(), NOW).actions == ()
    cluster.objects[ObjectKey("Pod", "default", "sb")]["status"] = owned_pod()["status"]
    cluster.converge()
    assert sandbox_of(cluster)["status"]["nodeName"] == "node-3"


def test_a_deleted_or_deleting_sandbox_gets_nothing() -> None:
    """§2.2 step 1: no Sandbox, or one being deleted: no writes (no finalizers anywhere)."""
    assert plan_sandbox(observation(None), NOW).actions == ()
    deleting = sandbox()
    deleting["metadata"]["deletionTimestamp"] = stamp(NOW)
    assert plan_sandbox(observation(deleting, pods=(owned_pod(),)), NOW).actions == ()


def test_a_refused_write_is_reported_before_it_is_retried() -> None:
    """A write the API server refused (the previous pass's error) shows as Ready=False/
    ReconcilerError, written before the retry, as upstream writes its status after a failed
    create."""
    error = 'create Pod/default/sb: Invalid (422): Pod "sb" is invalid: spec.containers[0].image'
    plan = plan_sandbox(observation(sandbox(), last_error=error), NOW)
    assert isinstance(plan.actions[0], Patch) and plan.actions[0].subresource == "status"
    written = status_written(plan)
    assert written is not None
    reason = next(c for c in written["conditions"] if c["type"] == "Ready")
    assert (reason["reason"], reason["message"]) == ("ReconcilerError", f"Error seen: {error}")
    assert [(a.target.kind, a.why) for a in plan.actions[1:]] == [
        ("Event", "event SandboxPodCreateFailed"),
        ("Pod", "create the Pod"),
        ("Event", "event SandboxPodCreated"),
    ]


def test_pvc_of_another_owner_is_an_error_but_the_pod_still_comes() -> None:
    """§2.2: PVCs, Pod and Service are reconciled in one pass; a PVC error is reported (and
    retried) without stopping the rest."""
    template = {"metadata": {"name": "data"}, "spec": {}}
    foreign = pvc("data-sb", owner=owner_ref(uid="x", name="o", kind="StatefulSet"))
    cluster = FakeCluster().add(sandbox(volumeClaimTemplates=[template]), foreign)
    plans = cluster.converge()
    assert cluster.get("Pod", "sb") is not None
    assert plans[-1].error is not None and "data-sb" in plans[-1].error
    assert ready(sandbox_of(cluster))[1] == "ReconcilerError"


def test_a_refused_status_write_is_simply_written_again() -> None:
    """When the refused write was the status itself there is nothing to report: the retry
    writes the status computed from the objects, not an error about the status."""
    error = "patch status Sandbox/default/sb: InternalError (500): etcd timeout"
    obs = observation(
        sandbox(annotations={ANNOTATION_POD_NAME: "sb"}), pods=(owned_pod(),), last_error=error
    )
    written = status_written(plan_sandbox(obs, NOW))
    assert written is not None
    reason = next(c for c in written["conditions"] if c["type"] == "Ready")
    assert (reason["status"], reason["reason"]) == ("True", "DependenciesReady")


@pytest.mark.parametrize(
    ("labels", "hashed_for", "adopted"),
    [({LABEL_ADOPTABLE: "true"}, None, True), ({}, "sb", True), ({}, None, False)],
    ids=["adoptable", "tracking label", "neither"],
)
def test_an_untracked_pod_named_like_the_sandbox_is_not_created_again(
    labels: dict[str, str], hashed_for: str | None, adopted: bool
) -> None:
    """The annotation names a Pod that is gone, and the name a new Pod would take is held by a
    Pod the Sandbox does not track. Upstream's create gets AlreadyExists and it goes on with
    that Pod; so does the planner: adopted when it may be, refused otherwise, and never a
    create that fails the same way at every pass (found by the property test)."""
    sb = sandbox(annotations={ANNOTATION_POD_NAME: "warm-1"})
    cluster = FakeCluster().add(sb, pod(labels=labels, hashed_for=hashed_for))
    plans = cluster.converge()
    assert not cluster.refused, "no create of a name that is taken"
    found = cluster.get("Pod", "sb")
    assert found is not None
    assert (found["metadata"].get("ownerReferences") == [owner_ref()]) == adopted
    # The stale name is forgotten either way: the Pod named like the Sandbox needs none.
    assert sandbox_of(cluster)["metadata"].get("annotations", {}).get(ANNOTATION_POD_NAME) is None
    assert (plans[-1].error is None) == adopted
