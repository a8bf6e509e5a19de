"""Pause and resume of a BatchSandbox (services/claim/core/batch/pause.py, through plan_batch): one
test per upstream test of batchsandbox_pause_resume_test.go (docs/opensandbox.md §7.1), each
naming the one it mirrors, then what sandbus does otherwise on purpose: a spec change that does
not change the intent changes nothing (§9.18), a failed pause is retried only when asked again,
and a pause asked of a sandbox still starting waits for it to run. The last tests go the whole
round trip on the fake API server of world.py, with the snapshot worker's part played by hand."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest

from api.objects import Json
from api.opensandbox import (
    ANNOTATION_ALLOC_RELEASE,
    ANNOTATION_ENDPOINTS,
    FINALIZER_POOL_ALLOCATION,
    LABEL_BATCH_SANDBOX_NAME,
    LABEL_POD_INDEX,
    LABEL_POOL_NAME,
    LABEL_POOL_REVISION,
)
from services.claim.core.batch.pause import pause_snapshot_name
from services.runtime.reconcile.actions import Create, Delete, Patch, Plan
from tests.support.plans import actions_of
from tests.unit.claim.batch.world import (
    NAME,
    NOW,
    NS,
    POOL,
    READY,
    UID,
    Cluster,
    batch_sandbox,
    batch_status,
    condition,
    conditions_of,
    created_names,
    creates,
    plan,
    pod,
    pool,
    stamp,
    status_patch,
)

SNAPSHOT = pause_snapshot_name(NAME)
MAIN_IMAGE = f"registry.example.com/snapshots/{NAME}-main:snap-gen1"
SIDECAR_IMAGE = f"registry.example.com/snapshots/{NAME}-sidecar:snap-gen1"


def sandbox_in(
    phase: str,
    *,
    pause: bool | None,
    generation: int = 2,
    observed: int | None = 1,
    replicas: int = 1,
    extra_conditions: tuple[Json, ...] = (),
    ready: int = 1,
    **kwargs: Any,
) -> Json:
    """A BatchSandbox in ``phase`` whose spec asks ``pause``; ``observed`` is its
    pauseObservedGeneration."""
    phase_conditions = {
        "Succeed": [condition(*READY)],
        "Pausing": [condition("Progressing", "PauseInProgress", "Pausing sandbox")],
        "Paused": [condition("Paused", "Paused", "Sandbox is paused")],
        "Resuming": [condition("Progressing", "ResumeInProgress", "Resuming sandbox")],
    }.get(phase, [])
    status = batch_status(
        phase=phase,
        replicas=ready if phase != "Paused" else 0,
        ready=ready if phase != "Paused" else 0,
        conditions=[*phase_conditions, *extra_conditions],
        generation=generation,
    )
    if observed is not None:
        status["pauseObservedGeneration"] = observed
    if ready and phase != "Paused" and "pool_ref" not in kwargs:
        kwargs.setdefault("annotations", {ANNOTATION_ENDPOINTS: '["10.0.0.1"]'})
    sandbox = batch_sandbox(replicas=replicas, status=status, generation=generation, **kwargs)
    if pause is not None:
        sandbox["spec"]["pause"] = pause
    return sandbox


def snapshot(
    phase: str | None = None,
    *,
    owner_uid: str = UID,
    deleting: bool = False,
    failed: str = "commit job failed",
) -> Json:
    """The sandbox's pause snapshot as the snapshot worker leaves it."""
    status: Json = {}
    if phase is not None:
        status["phase"] = phase
    if phase in ("Committing", "Succeed", "Failed"):
        status["sourcePodName"] = f"{NAME}-0"
        status["containers"] = [
            {"containerName": "main", "imageUri": MAIN_IMAGE},
            {"containerName": "sidecar", "imageUri": SIDECAR_IMAGE},
        ]
    if phase == "Failed":
        status["conditions"] = [condition("Failed", "CommitJobFailed", failed)]
    meta: Json = {
        "name": SNAPSHOT,
        "namespace": NS,
        "uid": "uid-snapshot",
        "resourceVersion": "30",
        "ownerReferences": [
            {
                "apiVersion": "sandbox.opensandbox.io/v1alpha1",
                "kind": "BatchSandbox",
                "name": NAME,
                "uid": owner_uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if deleting:
        meta["deletionTimestamp"] = stamp(NOW)
        meta["finalizers"] = ["sandboxsnapshot.sandbox.opensandbox.io/cleanup"]
    return {
        "apiVersion": "sandbox.opensandbox.io/v1alpha1",
        "kind": "SandboxSnapshot",
        "metadata": meta,
        "spec": {"sandboxName": NAME},
        "status": status,
    }


def own_pod(sandbox: Json, index: int = 0, **kwargs: Any) -> Json:
    return pod(f"{NAME}-{index}", owner=sandbox, **kwargs)


def pooled_pod(name: str = "pool-a-x1", **kwargs: Any) -> Json:
    """A Pool's Pod as its worker makes it: the pool labels, two containers, on a node."""
    obj = pod(name, owner=pool(), **kwargs)
    obj["metadata"]["labels"].update({LABEL_POOL_REVISION: "0123456789abcdef", "app": "demo"})
    obj["metadata"]["annotations"] = {"note": "from the pool"}
    obj["spec"] = {
        "nodeName": "node-3",
        "containers": [
            {"name": "main", "image": "nginx:1.27"},
            {"name": "sidecar", "image": "busybox:1.36"},
        ],
    }
    return obj


def pooled_sandbox(phase: str, *, pause: bool | None, **kwargs: Any) -> Json:
    return sandbox_in(
        phase,
        pause=pause,
        pool_ref=POOL,
        alloc=["pool-a-x1"],
        finalizers=[FINALIZER_POOL_ALLOCATION],
        **kwargs,
    )


def snapshot_creates(result: Plan) -> list[Json]:
    return [body for body in creates(result) if body["kind"] == "SandboxSnapshot"]


def spec_patches(result: Plan) -> list[Json]:
    return [
        a.patch
        for a in actions_of(result)
        if isinstance(a, Patch) and a.subresource is None and "spec" in a.patch
    ]


def deletes(result: Plan, kind: str) -> list[str]:
    return [
        a.target.name for a in actions_of(result) if isinstance(a, Delete) and a.target.kind == kind
    ]


# -- dispatch ---------------------------------------------------------------------------------


def test_dispatch_case1_pause_true() -> None:
    """TestDispatchPauseResume_Case1_PauseTrue and TestHandlePause_NormalFlow: pause asked of a
    running sandbox: Pausing, pauseObservedGeneration = generation, and the snapshot
    ``<bs>-pause`` of the sandbox, controlled by it."""
    sandbox = sandbox_in("Succeed", pause=True)
    result = plan(sandbox, own_pod(sandbox))
    status = status_patch(result)
    assert status is not None
    assert (status["phase"], status["pauseObservedGeneration"]) == ("Pausing", 2)
    assert conditions_of(status)["Progressing"] == ("PauseInProgress", "Pausing sandbox")
    [created] = snapshot_creates(result)
    assert created["metadata"]["name"] == SNAPSHOT
    assert created["spec"] == {"sandboxName": NAME}
    [owner] = created["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("BatchSandbox", UID, True)


def test_dispatch_case2_pause_false() -> None:
    """TestDispatchPauseResume_Case2_PauseFalse and TestHandleResume_NormalFlow: pause false on a
    Paused sandbox: Resuming, acknowledged, and no Pod yet (its images come first)."""
    sandbox = sandbox_in("Paused", pause=False)
    result = plan(sandbox, snapshot("Succeed"))
    status = status_patch(result)
    assert status is not None
    assert (status["phase"], status["pauseObservedGeneration"]) == ("Resuming", 2)
    assert created_names(result) == []


def test_dispatch_case3_pause_nil_is_no_dedicated_ack() -> None:
    """TestDispatchPauseResume_Case3_PauseNil_ACKOnly: a newer generation without a pause intent
    writes nothing of its own; the acknowledgement rides on the next status write."""
    sandbox = sandbox_in("Succeed", pause=None)
    assert plan(sandbox, own_pod(sandbox)).actions == ()
    # The next write for another reason carries it along.
    failing = own_pod(sandbox, waiting="ErrImagePull")
    status = status_patch(plan(sandbox, failing))
    assert status is not None
    assert (status["phase"], status["pauseObservedGeneration"]) == ("Failed", 2)


def test_dispatch_case4_pausing_with_a_committing_snapshot_waits() -> None:
    """TestDispatchPauseResume_Case4_GenEqual_PauseSet: Pausing while the snapshot commits: no
    write, no Pod created, a look again later."""
    sandbox = sandbox_in("Pausing", pause=True, generation=2, observed=2, ready=0)
    result = plan(sandbox, snapshot("Committing"))
    assert result.actions == ()
    assert result.requeue_after is not None


def test_dispatch_case5_settled_is_not_handled() -> None:
    """TestDispatchPauseResume_Case5_GenEqual_PauseNil: nothing asked, nothing done."""
    sandbox = sandbox_in("Succeed", pause=None, generation=2, observed=2)
    assert plan(sandbox, own_pod(sandbox)).actions == ()


# -- handlePause ------------------------------------------------------------------------------


def test_handle_pause_rejects_unsupported_replicas() -> None:
    """TestHandlePause_RejectsUnsupportedReplicas: replicas 2 → PauseFailed
    UnsupportedReplicas, the phase kept, acknowledged, no snapshot."""
    sandbox = sandbox_in("Succeed", pause=True, replicas=2, ready=2)
    result = plan(sandbox, own_pod(sandbox, 0), own_pod(sandbox, 1))
    status = status_patch(result)
    assert status is not None
    assert (status["phase"], status["pauseObservedGeneration"]) == ("Succeed", 2)
    assert conditions_of(status)["PauseFailed"][0] == "UnsupportedReplicas"
    assert snapshot_creates(result) == []


def test_handle_pause_pool_mode_keeps_pool_ref_and_template() -> None:
    """TestHandlePause_PoolMode and …PoolModeDoesNotRequirePoolCR: a pooled pause starts
    without touching the spec, whether or not the Pool object exists."""
    sandbox = pooled_sandbox("Succeed", pause=True)
    for objects in ((pooled_pod(),), (pooled_pod(), pool())):
        result = plan(sandbox, *objects)
        assert spec_patches(result) == []
        assert len(snapshot_creates(result)) == 1
        assert status_patch(result)["phase"] == "Pausing"  # type: ignore[index]


@pytest.mark.parametrize("phase", ["Failed", "Succeed"])
def test_handle_pause_deletes_a_stale_snapshot_first(phase: str) -> None:
    """TestHandlePause_FailedRetry and …SucceededSnapshotRetry: a terminal snapshot from before
    is deleted first, with no acknowledgement and no phase change."""
    sandbox = sandbox_in("Succeed", pause=True)
    result = plan(sandbox, own_pod(sandbox), snapshot(phase))
    assert deletes(result, "SandboxSnapshot") == [SNAPSHOT]
    assert status_patch(result) is None
    assert snapshot_creates(result) == []


def test_handle_pause_waits_for_a_deleting_snapshot() -> None:
    """handlePause, a snapshot being deleted: wait, write nothing."""
    sandbox = sandbox_in("Succeed", pause=True)
    result = plan(sandbox, own_pod(sandbox), snapshot("Succeed", deleting=True))
    assert result.actions == ()
    assert result.requeue_after is not None


def test_a_snapshot_of_that_name_that_is_not_ours_is_left_alone() -> None:
    """sandbus: a SandboxSnapshot named ``<bs>-pause`` that another object controls is neither
    deleted nor taken for ours."""
    sandbox = sandbox_in("Succeed", pause=True)
    result = plan(sandbox, own_pod(sandbox), snapshot("Succeed", owner_uid="someone-else"))
    assert deletes(result, "SandboxSnapshot") == []
    assert snapshot_creates(result) == []
    assert status_patch(result) is None


# -- syncPauseOrClear and completePause -------------------------------------------------------


def test_sync_pause_without_a_snapshot_creates_it() -> None:
    """TestSyncPauseOrClear_NoSnapshot: Pausing without a snapshot → create it."""
    sandbox = sandbox_in("Pausing", pause=True, observed=2)
    result = plan(sandbox, own_pod(sandbox))
    assert [b["metadata"]["name"] for b in snapshot_creates(result)] == [SNAPSHOT]


def test_sync_pause_committing_requeues() -> None:
    """TestSyncPauseOrClear_SnapshotCommitting: look again later, no write."""
    sandbox = sandbox_in("Pausing", pause=True, observed=2)
    result = plan(sandbox, own_pod(sandbox), snapshot("Committing"))
    assert result.actions == ()
    assert result.requeue_after is not None


def test_complete_pause_non_pooled() -> None:
    """TestSyncPauseOrClear_SnapshotReady, TestCompletePause and
    …AddsPausedConditionFromEmptyConditions: the Pod is deleted, then Paused with the Paused
    condition; replicas and pause stay as they are in the spec."""
    sandbox = sandbox_in("Pausing", pause=True, observed=1, generation=2)
    result = plan(sandbox, own_pod(sandbox), snapshot("Succeed"))
    assert deletes(result, "Pod") == [f"{NAME}-0"]
    status = status_patch(result)
    assert status is not None
    assert (status["phase"], status["pauseObservedGeneration"]) == ("Paused", 2)
    assert conditions_of(status)["Paused"] == ("Paused", "Sandbox is paused")
    assert spec_patches(result) == []


def test_complete_pause_deletes_before_it_says_paused() -> None:
    """TestCompletePause_DeleteFailureLeavesPhasePausing: the Pod's delete comes before the
    status write, so a delete that fails (the runtime stops at the first failed action) leaves
    the phase Pausing."""
    sandbox = sandbox_in("Pausing", pause=True, observed=2)
    result = plan(sandbox, own_pod(sandbox), snapshot("Succeed"))
    kinds = [type(a).__name__ for a in result.actions if not isinstance(a, Create)]
    assert kinds.index("Delete") < len(kinds) - 1
    assert isinstance(result.actions[-1], Patch) and result.actions[-1].subresource == "status"


def test_complete_pause_does_not_acknowledge_a_queued_resume() -> None:
    """TestCompletePause_DoesNotAcknowledgeQueuedResumeGeneration: pause was set back to false
    while the snapshot committed: Paused, but the newer generation stays unacknowledged so that
    the resume is not lost; the next pass resumes."""
    sandbox = sandbox_in("Pausing", pause=False, observed=2, generation=3)
    cluster = Cluster()
    cluster.add(sandbox, own_pod(sandbox), snapshot("Succeed"))
    status = status_patch(cluster.reconcile())
    assert status is not None
    assert (status["phase"], status["pauseObservedGeneration"]) == ("Paused", 2)
    cluster.terminate()
    after = status_patch(cluster.reconcile())
    assert after is not None
    assert (after["phase"], after["pauseObservedGeneration"]) == ("Resuming", 3)


def test_complete_pause_pooled_detaches_for_pool_gc() -> None:
    """TestCompletePause_PooledSandboxDetachesForPoolGC and …DoesNotDeleteSourcePod: the
    template is the Pod's, without the Pool's and the BatchSandbox's labels and without its
    node; poolRef is "", the pool-allocation finalizer and alloc-release go, alloc-status
    stays; the Pod is not deleted here (its Pool takes it back)."""
    sandbox = pooled_sandbox("Pausing", pause=True, observed=2)
    sandbox["metadata"]["annotations"][ANNOTATION_ALLOC_RELEASE] = '{"pods":[]}'
    held = pooled_pod()
    held["metadata"]["labels"][LABEL_BATCH_SANDBOX_NAME] = NAME
    held["metadata"]["labels"][LABEL_POD_INDEX] = "0"
    result = plan(sandbox, held, snapshot("Succeed"))
    [patch] = spec_patches(result)
    template = patch["spec"]["template"]
    assert patch["spec"]["poolRef"] == ""
    assert template["metadata"]["labels"] == {"app": "demo"}
    assert template["metadata"]["annotations"] == {"note": "from the pool"}
    assert "nodeName" not in template["spec"]
    assert [c["name"] for c in template["spec"]["containers"]] == ["main", "sidecar"]
    assert patch["metadata"]["finalizers"] == []
    assert patch["metadata"]["annotations"] == {ANNOTATION_ALLOC_RELEASE: None}
    assert deletes(result, "Pod") == []
    assert status_patch(result) is None  # the next pass, no longer pooled, says Paused


def test_complete_pause_pooled_acknowledges_the_generation_of_its_detach() -> None:
    """TestCompletePause_PooledSandboxAcknowledgesSpecPatchGeneration: the detach is a spec
    change (a new generation); Paused acknowledges that one."""
    cluster = Cluster()
    cluster.add(
        pooled_sandbox("Pausing", pause=True, observed=2), pooled_pod(), snapshot("Succeed")
    )
    cluster.reconcile()
    detached = cluster.get("BatchSandbox", NAME)
    assert detached is not None and detached["metadata"]["generation"] == 3
    status = status_patch(cluster.reconcile())
    assert status is not None
    assert (status["phase"], status["pauseObservedGeneration"]) == ("Paused", 3)
    assert created_names(cluster.reconcile()) == []  # Paused: no Pod from the new template


def test_sync_pause_snapshot_failed_with_the_pod_running() -> None:
    """syncPauseOrClear, Failed snapshot while the Pod runs: the sandbox runs on (Succeed) with
    PauseFailed SnapshotFailed and the snapshot's message; pause stays asked."""
    sandbox = sandbox_in("Pausing", pause=True, observed=2)
    result = plan(sandbox, own_pod(sandbox), snapshot("Failed", failed="push: unauthorized"))
    status = status_patch(result)
    assert status is not None
    assert status["phase"] == "Succeed"
    assert conditions_of(status)["PauseFailed"] == ("SnapshotFailed", "push: unauthorized")
    assert spec_patches(result) == []


def test_sync_pause_snapshot_failed_and_the_pod_gone() -> None:
    """TestSyncPauseOrClear_SnapshotFailed: no Pod → Failed + PauseFailed PodNotFound."""
    sandbox = sandbox_in("Pausing", pause=True, observed=2, ready=0)
    status = status_patch(plan(sandbox, snapshot("Failed")))
    assert status is not None
    assert status["phase"] == "Failed"
    assert conditions_of(status)["PauseFailed"][0] == "PodNotFound"


def test_paused_non_pooled_does_not_scale_pods() -> None:
    """TestReconcile_PausedNonPoolDoesNotScalePods: a Paused sandbox's missing Pod is not made."""
    sandbox = sandbox_in("Paused", pause=True, generation=2, observed=2)
    assert created_names(plan(sandbox, snapshot("Succeed"))) == []


# -- resume -----------------------------------------------------------------------------------


def test_continue_resume_replaces_the_images() -> None:
    """TestContinueResume_NormalFlow and …PreservesExistingReplicas: the template's containers
    run the snapshot's images; replicas and pause are not in the patch; the pull secret is
    added once."""
    for replicas in (1, 2):
        sandbox = sandbox_in("Resuming", pause=False, observed=2, ready=0, replicas=replicas)
        sandbox["spec"]["template"]["spec"]["imagePullSecrets"] = [{"name": "pull"}]
        result = plan(sandbox, snapshot("Succeed"), pull_secret="pull")
        [patch] = spec_patches(result)
        containers = patch["spec"]["template"]["spec"]["containers"]
        assert [c["image"] for c in containers] == [MAIN_IMAGE, SIDECAR_IMAGE]
        assert patch["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "pull"}]
        assert "replicas" not in patch["spec"] and "pause" not in patch["spec"]
        assert created_names(result) == []
    fresh = sandbox_in("Resuming", pause=False, observed=2, ready=0)
    [patch] = spec_patches(plan(fresh, snapshot("Succeed"), pull_secret="registry-pull"))
    assert patch["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "registry-pull"}]


def test_handle_and_continue_resume_pool_mode() -> None:
    """TestHandleResume_PoolMode and TestContinueResume_PoolMode: the resume's spec patch of a
    sandbox still pooled clears poolRef and the pool-allocation finalizer."""
    sandbox = pooled_sandbox("Resuming", pause=False, observed=2, ready=0)
    sandbox["spec"]["template"] = copy.deepcopy(batch_sandbox()["spec"]["template"])
    [patch] = spec_patches(plan(sandbox, snapshot("Succeed")))
    assert patch["spec"]["poolRef"] == ""
    assert patch["metadata"]["finalizers"] == []


def test_continue_resume_snapshot_not_found() -> None:
    """TestContinueResume_SnapshotNotFound: back to Paused with ResumeFailed."""
    sandbox = sandbox_in("Resuming", pause=False, observed=2, ready=0)
    status = status_patch(plan(sandbox))
    assert status is not None
    assert status["phase"] == "Paused"
    assert conditions_of(status)["ResumeFailed"][0] == "SnapshotNotFound"


def test_continue_resume_snapshot_missing_but_a_ready_pod() -> None:
    """TestContinueResume_SnapshotMissingButReadyPodTreatsResumeAsComplete: Succeed, and no
    ResumeFailed."""
    sandbox = sandbox_in(
        "Resuming",
        pause=False,
        observed=2,
        extra_conditions=(condition("ResumeFailed", "SnapshotNotReady", "x"),),
    )
    status = status_patch(plan(sandbox, own_pod(sandbox)))
    assert status is not None
    assert status["phase"] == "Succeed"
    assert "ResumeFailed" not in conditions_of(status)


def test_continue_resume_snapshot_not_ready() -> None:
    """TestContinueResume_SnapshotNotReady: Paused + ResumeFailed SnapshotNotReady."""
    sandbox = sandbox_in("Resuming", pause=False, observed=2, ready=0)
    status = status_patch(plan(sandbox, snapshot("Committing")))
    assert status is not None
    assert status["phase"] == "Paused"
    assert conditions_of(status)["ResumeFailed"] == (
        "SnapshotNotReady",
        "snapshot not ready: phase=Committing",
    )


def test_resuming_pooled_does_not_complete_on_the_old_pool_pod() -> None:
    """TestReconcile_ResumingPoolResumeRebuildsStrategyAfterContinueResume: once detached, the
    Pool's Pod it once held does not end the resume; ``<bs>-0`` is created, with its labels."""
    cluster = Cluster()
    sandbox = pooled_sandbox("Resuming", pause=False, observed=2, ready=0)
    sandbox["spec"]["template"] = copy.deepcopy(batch_sandbox()["spec"]["template"])
    cluster.add(sandbox, pooled_pod(), snapshot("Succeed"))
    cluster.reconcile()  # the images and the detach
    result = cluster.reconcile()
    assert created_names(result) == [f"{NAME}-0"]
    [body] = [b for b in creates(result) if b["kind"] == "Pod"]
    assert body["metadata"]["labels"][LABEL_BATCH_SANDBOX_NAME] == NAME
    assert [c["image"] for c in body["spec"]["containers"]] == [MAIN_IMAGE, SIDECAR_IMAGE]
    assert status_patch(result)["phase"] == "Resuming"  # type: ignore[index]


def test_resuming_ignores_a_deleting_ready_pod() -> None:
    """TestReconcile_ResumingIgnoresDeletingReadyPodWhenCompletingResume: a terminating Ready
    Pod does not count; the phase stays Resuming and the snapshot stays."""
    sandbox = sandbox_in("Resuming", pause=False, observed=2, ready=0)
    sandbox["spec"]["template"]["spec"]["containers"][0]["image"] = MAIN_IMAGE
    sandbox["spec"]["template"]["spec"]["containers"][1]["image"] = SIDECAR_IMAGE
    result = plan(sandbox, own_pod(sandbox, deleting=True), snapshot("Succeed"))
    assert deletes(result, "SandboxSnapshot") == []
    status = status_patch(result)
    assert status is None or status["phase"] == "Resuming"


def test_resume_failures_are_aggregated() -> None:
    """TestBuildRuntimeView_AggregatesResumeFailures: a Pod failing during the resume makes it
    Failed with ResumeFailed and PodFailed, whose message says "during resume"; the snapshot is
    kept (e2e: a tampered image URI)."""
    sandbox = sandbox_in("Resuming", pause=False, observed=2, ready=0)
    sandbox["spec"]["template"]["spec"]["containers"][0]["image"] = MAIN_IMAGE
    sandbox["spec"]["template"]["spec"]["containers"][1]["image"] = SIDECAR_IMAGE
    failing = own_pod(sandbox, waiting="ErrImagePull", ready=False)
    result = plan(sandbox, failing, snapshot("Succeed"))
    status = status_patch(result)
    assert status is not None
    assert status["phase"] == "Failed"
    conditions = conditions_of(status)
    assert conditions["ResumeFailed"][0] == conditions["PodFailed"][0] == "ErrImagePull"
    assert conditions["PodFailed"][1].endswith("during resume")
    assert deletes(result, "SandboxSnapshot") == []


def test_a_finished_resume_deletes_the_snapshot() -> None:
    """TestPersistRuntimeView_RetriesSucceededPauseSnapshotCleanup: once its Pod is Ready the
    resume is done, the phase Succeed and the snapshot deleted."""
    sandbox = sandbox_in("Resuming", pause=False, observed=2, ready=0)
    sandbox["spec"]["template"]["spec"]["containers"][0]["image"] = MAIN_IMAGE
    sandbox["spec"]["template"]["spec"]["containers"][1]["image"] = SIDECAR_IMAGE
    result = plan(sandbox, own_pod(sandbox), snapshot("Succeed"))
    assert deletes(result, "SandboxSnapshot") == [SNAPSHOT]
    assert status_patch(result)["phase"] == "Succeed"  # type: ignore[index]


def test_the_pause_flow_never_patches_spec_pause() -> None:
    """TestAckPauseWithPhase_DoesNotMutateSpecPause: no write of any pass touches spec.pause."""
    for sandbox, objects in (
        (sandbox_in("Succeed", pause=True), ()),
        (sandbox_in("Pausing", pause=True, observed=2), (snapshot("Succeed"),)),
        (sandbox_in("Resuming", pause=False, observed=2, ready=0), (snapshot("Succeed"),)),
    ):
        for patch in spec_patches(plan(sandbox, own_pod(sandbox), *objects)):
            assert "pause" not in patch["spec"]


# -- sandbus: the intent, not the generation (§9.18) -------------------------------------------


def test_a_renewal_after_a_resume_does_not_resume_again() -> None:
    """§9.18: after a resume, ``pause: false`` stays set; a later spec change (the server
    renewing expireTime) does not send the sandbox through Resuming."""
    renewed = sandbox_in("Succeed", pause=False, generation=5, observed=4)
    renewed["spec"]["expireTime"] = stamp(NOW + timedelta(hours=1))
    result = plan(renewed, own_pod(renewed))
    assert result.actions == ()
    assert snapshot_creates(result) == []


def test_a_renewal_of_a_paused_sandbox_keeps_its_snapshot() -> None:
    """§9.18: on a Paused sandbox a renewal neither deletes the good snapshot nor pauses again."""
    renewed = sandbox_in("Paused", pause=True, generation=5, observed=4)
    renewed["spec"]["expireTime"] = stamp(NOW + timedelta(hours=1))
    result = plan(renewed, snapshot("Succeed"))
    assert deletes(result, "SandboxSnapshot") == []
    assert snapshot_creates(result) == []
    assert created_names(result) == []


def test_a_failed_pause_is_retried_only_when_asked_again() -> None:
    """e2e "PauseFailed retry through nil→true": a failed pause is not retried by a renewal;
    pause null withdraws it (the condition goes), and true again retries."""
    failed = condition("PauseFailed", "SnapshotFailed", "push: unauthorized")
    renewed = sandbox_in(
        "Succeed", pause=True, generation=5, observed=4, extra_conditions=(failed,)
    )
    assert snapshot_creates(plan(renewed, own_pod(renewed))) == []
    withdrawn = sandbox_in(
        "Succeed", pause=None, generation=6, observed=4, extra_conditions=(failed,)
    )
    status = status_patch(plan(withdrawn, own_pod(withdrawn)))
    assert status is not None
    assert "PauseFailed" not in conditions_of(status)
    asked = sandbox_in("Succeed", pause=True, generation=7, observed=6)
    result = plan(asked, own_pod(asked))
    assert len(snapshot_creates(result)) == 1
    assert status_patch(result)["phase"] == "Pausing"  # type: ignore[index]


def test_a_pause_asked_of_a_starting_sandbox_waits_for_it_to_run() -> None:
    """§9.18 ("creating a BatchSandbox with pause already set breaks it"): a sandbox created with
    ``pause: true`` starts normally, and pauses once it runs."""
    sandbox = batch_sandbox(replicas=1)
    sandbox["spec"]["pause"] = True
    result = plan(sandbox)
    assert created_names(result) == [f"{NAME}-0"]
    assert snapshot_creates(result) == []


# -- round trips ------------------------------------------------------------------------------


def _commit(cluster: Cluster) -> None:
    """The snapshot worker's part: the pause snapshot is committed."""
    stored = cluster.get("SandboxSnapshot", SNAPSHOT)
    assert stored is not None
    stored["status"] = snapshot("Succeed")["status"]


def _ask(cluster: Cluster, pause: bool) -> None:
    stored = cluster.get("BatchSandbox", NAME)
    assert stored is not None
    stored["spec"]["pause"] = pause
    stored["metadata"]["generation"] += 1


def _phase(cluster: Cluster) -> str:
    stored = cluster.get("BatchSandbox", NAME)
    assert stored is not None
    return str(stored["status"]["phase"])


def test_round_trip_non_pooled() -> None:
    """e2e pause_resume_test :160: pause → Paused with the Pod deleted and the snapshot kept;
    resume → Succeed on the snapshot's images, the snapshot deleted; same name and uid."""
    cluster = Cluster()
    cluster.add(batch_sandbox(replicas=1))
    cluster.converge()
    assert _phase(cluster) == "Succeed"
    _ask(cluster, True)
    cluster.converge()
    assert _phase(cluster) == "Pausing"
    _commit(cluster)
    cluster.reconcile()
    cluster.terminate()
    cluster.converge()
    assert _phase(cluster) == "Paused"
    assert cluster.pods() == []
    assert cluster.get("SandboxSnapshot", SNAPSHOT) is not None
    _ask(cluster, False)
    cluster.converge()
    assert _phase(cluster) == "Succeed"
    [resumed] = cluster.pods()
    assert [c["image"] for c in resumed["spec"]["containers"]] == [MAIN_IMAGE, SIDECAR_IMAGE]
    assert cluster.get("SandboxSnapshot", SNAPSHOT) is None
    stored = cluster.get("BatchSandbox", NAME)
    assert stored is not None and stored["metadata"]["uid"] == UID


def test_round_trip_pooled() -> None:
    """e2e pause_resume_test :334: a pooled pause keeps the Pod's template and leaves the Pool;
    the resume runs ``<bs>-0`` of its own from the snapshot's images."""
    cluster = Cluster()
    cluster.add(pooled_sandbox("Succeed", pause=None, observed=None), pooled_pod())
    _ask(cluster, True)
    cluster.converge()
    assert _phase(cluster) == "Pausing"
    _commit(cluster)
    cluster.converge()
    assert _phase(cluster) == "Paused"
    stored = cluster.get("BatchSandbox", NAME)
    assert stored is not None
    assert stored["spec"]["poolRef"] == ""
    assert FINALIZER_POOL_ALLOCATION not in (stored["metadata"].get("finalizers") or ())
    assert LABEL_POOL_NAME not in stored["spec"]["template"]["metadata"]["labels"]
    _ask(cluster, False)
    cluster.converge()
    assert _phase(cluster) == "Succeed"
    names = [p["metadata"]["name"] for p in cluster.pods()]
    assert f"{NAME}-0" in names
    assert cluster.get("SandboxSnapshot", SNAPSHOT) is None
